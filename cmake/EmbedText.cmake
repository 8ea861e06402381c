# EmbedText.cmake: cmake -DIN=<text file> -DOUT=<header> -DNAME=<identifier> -P EmbedText.cmake
# writes OUT declaring `inline constexpr char NAME[]` holding IN's text (a raw string literal;
# the build fails if the text contains its delimiter). Used for the PTX libcapuchin.so embeds.
file(READ "${IN}" _text)
string(FIND "${_text}" ")capuchin_embed\"" _clash)
if(NOT _clash EQUAL -1)
  message(FATAL_ERROR "EmbedText: ${IN} contains the raw-string delimiter")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by cmake/EmbedText.cmake: do not edit.\n#pragma once\ninline constexpr char ${NAME}[] = R\"capuchin_embed(${_text})capuchin_embed\";\n")
file(RENAME "${OUT}.tmp" "${OUT}")
