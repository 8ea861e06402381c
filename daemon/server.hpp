// server.hpp: capuchind's Unix-socket server on one Boost.Asio io_context. Every accepted
// connection is checked with SO_PEERCRED (same uid or root, else refused), then speaks the
// binary session protocol (first byte 'C', include/capuchin/protocol.hpp) or JSON queries
// (first byte '{', daemon/query.hpp).
//
// Contract: bad input on a connection (garbage, bad frames, huge lengths, unknown methods,
// a wrong version) gets an error reply and/or a closed connection; buffers are bounded (one
// frame, one JSON line of at most 1 MiB, a capped write queue). Nothing a peer sends can
// crash the daemon or grow its memory without bound. Connections and sessions live on the
// io thread; a job's segment is planned on a worker (the result is posted back), so
// queries and event ingestion never wait for a plan.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <memory>
#include <string>

#include "capuchin/expected.hpp"
#include "query.hpp"

namespace capuchin::daemon {

class Server {
 public:
  // `planners`: worker threads that plan jobs' segments (off the io thread).
  Server(boost::asio::io_context& io, Registry& registry, unsigned planners = 2)
      : registry_(registry), acceptor_(io), accept_retry_(io), workers_(planners) {}
  ~Server() { workers_.join(); }
  // Creates the socket's directory (0700) if needed, refuses a path another daemon serves,
  // replaces a stale socket, binds (0600) and starts accepting.
  Status listen(const std::string& path);
  void stop();  // stops accepting and removes the socket file (if still ours)

 private:
  void accept();
  Registry& registry_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  boost::asio::thread_pool workers_;
  std::string path_;
  unsigned long inode_ = 0;
};

}  // namespace capuchin::daemon
