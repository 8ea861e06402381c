#!/usr/bin/env python3
"""Tests of scripts/foreach_launches.py (multi_tensor_apply's launches) and of
scripts/chunk_foreach_trace.py (the converter for traces captured before the split).
Usage: foreach_launches_test.py SCRIPTS_DIR [CAPUCHIN_BIN]  (CAPUCHIN_BIN: validate the output)."""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPTS = os.path.abspath(sys.argv.pop(1))
BIN = sys.argv.pop(1) if len(sys.argv) > 1 else None
sys.path.insert(0, SCRIPTS)
from foreach_launches import CHUNK_ELEMENTS, launches, per_position, split_kernel  # noqa: E402

C = CHUNK_ELEMENTS


class Launches(unittest.TestCase):
    def test_small_lists_are_one_launch(self):
        self.assertEqual(launches([10, 20, 30], 3), [([0, 1, 2], 60)])

    def test_tensor_limit_by_depth_and_kernel_argument_size(self):
        # 4 KB: 48 tensors at depth 3, 64 at depth 2; 32 KB: 336 at depth 3.
        numels = [1] * 53
        self.assertEqual([len(p) for p, _ in launches(numels, 3, "4kb")], [48, 5])
        self.assertEqual([len(p) for p, _ in launches(numels, 2, "4kb")], [53])
        self.assertEqual([len(p) for p, _ in launches([1] * 400, 3, "32kb")], [336, 64])
        # A list of scalars lowers depth 1's limit to 96 (4 KB).
        self.assertEqual([len(p) for p, _ in launches([1] * 100, 1, "4kb")], [100])
        self.assertEqual([len(p) for p, _ in launches([1] * 100, 1, "4kb", scalar_list=True)], [96, 4])

    def test_a_tensor_cut_by_a_full_launch_goes_on_in_the_next(self):
        # 320 blocks per launch (4 KB): a 500-chunk tensor after a 1-chunk one.
        plan = launches([1, 500 * C], 1, "4kb")
        self.assertEqual([p for p, _ in plan], [[0, 1], [1]])
        self.assertEqual([n for _, n in plan], [1 + 319 * C, 181 * C])

    def test_a_full_tensor_count_waits_for_the_last_chunk(self):
        # At the 48th tensor the launch waits for that tensor's last chunk.
        plan = launches([1] * 47 + [3 * C, 1], 3, "4kb")
        self.assertEqual([p for p, _ in plan], [list(range(48)), [48]])
        self.assertEqual(plan[0][1], 47 + 3 * C)

    def test_empty_tensors_are_in_no_launch(self):
        self.assertEqual(launches([0, 5, 0], 1), [([1], 5)])
        self.assertEqual(launches([0, 0], 1), [])
        self.assertEqual(per_position([3, 0, 4]), [([0], 3), ([2], 4)])

    def test_bad_arguments_are_named(self):
        with self.assertRaisesRegex(ValueError, "1 to 5"):
            launches([1], 6)
        with self.assertRaisesRegex(ValueError, "kernel_args"):
            launches([1], 1, "8kb")


class Split(unittest.TestCase):
    EV = {"op": "kernel", "name": "aten::_foreach_add_", "reads": [1, 2, 3, 11, 12, 13, 99],
          "writes": [1, 2, 3], "bytes": 1001, "flops": 7}

    def test_each_launch_touches_its_positions_and_the_constants(self):
        plan = [([0, 1], 2), ([1, 2], 1)]
        out = split_kernel(self.EV, [[1, 2, 3], [11, 12, 13]], plan, constant=[99])
        self.assertEqual([e["reads"] for e in out], [[1, 2, 11, 12, 99], [2, 3, 12, 13, 99]])
        self.assertEqual([e["writes"] for e in out], [[1, 2], [2, 3]])
        self.assertEqual(sum(e["bytes"] for e in out), 1001)
        self.assertEqual(sum(e.get("flops", 0) for e in out), 7)
        self.assertEqual(self.EV["reads"], [1, 2, 3, 11, 12, 13, 99], "the event given is not changed")

    def test_one_launch_is_the_event_itself(self):
        self.assertIs(split_kernel(self.EV, [[1, 2, 3]], [([0, 1, 2], 3)])[0], self.EV)


def write_trace(path, events, header=None):
    h = header or {"format": "capuchin-trace", "version": 1, "dtype": "float32"}
    with gzip.open(path, "wt") as f:
        for ev in [h] + events:
            f.write(json.dumps(ev) + "\n")


def read_trace(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


class Converter(unittest.TestCase):
    def run_converter(self, *args):
        return subprocess.run([sys.executable, os.path.join(SCRIPTS, "chunk_foreach_trace.py"), *args],
                              capture_output=True, text=True)

    def test_splits_an_optimizer_step_and_moves_frees_to_the_last_launch_touching_them(self):
        n = 50  # parameters; addcmul_(exp_avg_sq, grads, grads) is depth 3: 48 tensors per 4 KB launch
        params, grads = list(range(n)), list(range(100, 100 + n))
        events = [{"op": "alloc", "id": i, "bytes": 4 * (i + 1)} for i in params]
        events += [{"op": "iter", "n": 1}]
        events += [{"op": "alloc", "id": g, "bytes": 4 * (g - 99)} for g in grads]
        events += [{"op": "kernel", "name": "aten::_foreach_addcmul_", "reads": params + grads, "writes": params,
                    "bytes": 5000}]
        events += [{"op": "free", "id": g} for g in grads]
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "in.jsonl.gz"), os.path.join(d, "out.jsonl.gz")
            write_trace(src, events)
            r = self.run_converter(src, dst, "--kernel-args", "4kb")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("1 foreach kernels -> 2 launches", r.stdout)
            out = read_trace(dst)
            self.assertEqual(out[0]["foreach_launches"], "4kb")
            ops = [(e["op"], len(e.get("reads", [])) or e.get("id")) for e in out[1:] if e["op"] in ("kernel", "free")]
            # First launch: 48 params and their grads, then the 48 grads freed; then the rest.
            self.assertEqual(ops[0], ("kernel", 96))
            self.assertEqual([x for _, x in ops[1:49]], grads[:48])
            self.assertEqual(ops[49], ("kernel", 4))
            self.assertEqual([x for _, x in ops[50:]], grads[48:])
            kernels = [e for e in out if e.get("op") == "kernel"]
            self.assertEqual(sum(k["bytes"] for k in kernels), 5000)
            if BIN:
                v = subprocess.run([BIN, "trace", "validate", "-q", dst], capture_output=True, text=True)
                self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            # Whatever the name says, gzip is told by its bytes.
            plain = os.path.join(d, "in.jsonl")
            with open(plain, "wb") as f, open(src, "rb") as g:
                f.write(g.read())
            r = self.run_converter(plain, dst, "--kernel-args", "4kb")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(len([e for e in read_trace(dst) if e.get("op") == "kernel"]), 2)
            # At 32 KB the op is one launch and the trace is the same, bar the header.
            r = self.run_converter(src, dst, "--kernel-args", "32kb")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(read_trace(dst)[1:], read_trace(src)[1:])

    def convert_one(self, kernel, sizes, kernel_args="4kb"):
        """The launches of one kernel event over storages of `sizes` (id -> bytes)."""
        events = [{"op": "alloc", "id": i, "bytes": b} for i, b in sizes.items()] + [kernel]
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "in.jsonl.gz"), os.path.join(d, "out.jsonl.gz")
            write_trace(src, events)
            r = self.run_converter(src, dst, "--kernel-args", kernel_args)
            self.assertEqual(r.returncode, 0, r.stderr)
            return [e for e in read_trace(dst) if e.get("op") == "kernel"], r.stderr

    def test_ops_whose_lists_cannot_be_told_apart_are_kept_whole(self):
        n = 70  # over 4 KB's 64 tensors at two lists
        a, b = list(range(n)), list(range(100, 100 + n))
        sizes = {i: 4 for i in a + b}
        add = {"op": "kernel", "name": "aten::_foreach_add_", "reads": a + b, "writes": a, "bytes": 10}
        self.assertEqual(len(self.convert_one(add, sizes)[0]), 2)
        # A size that differs between the lists at a position: not the fast route as recovered.
        launches_, err = self.convert_one(add, {**sizes, 100: 8})
        self.assertEqual(len(launches_), 1)
        self.assertIn("1 foreach kernels kept whole", err)
        # _foreach_norm's results come from a second kernel: kept as it is.
        norm = {"op": "kernel", "name": "aten::_foreach_norm", "reads": a, "writes": b, "bytes": 10}
        self.assertEqual(len(self.convert_one(norm, sizes)[0]), 1)

    def test_a_repeated_list_of_addcmul_counts_in_its_depth(self):
        # Out of place, addcmul(self, t, t) has 4 lists (36 tensors per 4 KB launch), though
        # the trace shows t once: 40 positions are two launches, not one of 48.
        n = 40
        s_, t, out = list(range(n)), list(range(100, 100 + n)), list(range(200, 200 + n))
        sizes = {i: 4 for i in s_ + t + out}
        op = {"op": "kernel", "name": "aten::_foreach_addcmul", "reads": s_ + t, "writes": out, "bytes": 10}
        self.assertEqual([len(k["writes"]) for k in self.convert_one(op, sizes)[0]], [36, 4])

    def test_bad_input_is_named_and_leaves_no_file(self):
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "in.jsonl.gz"), os.path.join(d, "out.jsonl.gz")
            write_trace(src, [], header={"format": "capuchin-trace", "version": 1, "foreach_launches": "32kb"})
            r = self.run_converter(src, dst)
            self.assertEqual(r.returncode, 1)
            self.assertIn("already split", r.stderr)
            self.assertFalse(os.path.exists(dst) or os.path.exists(dst + ".partial"))
            header = b'{"format":"capuchin-trace","version":1}\n'
            cases = [  # (the file's bytes, what stderr must say)
                (gzip.compress(header + b'{"op":"kernel",\n'), "in.jsonl.gz:2: not JSON"),
                (gzip.compress(header + b"[1,2]\n"), "in.jsonl.gz:2: not a JSON object"),
                (gzip.compress(header + b'{"op":"alloc","id":3}\n'), "in.jsonl.gz:2: bad alloc event"),
                (gzip.compress(header * 50)[:40], "chunk_foreach_trace:"),  # a cut gzip stream
            ]
            for data, says in cases:
                with open(src, "wb") as f:
                    f.write(data)
                r = self.run_converter(src, dst)
                self.assertEqual(r.returncode, 1, says)
                self.assertIn(says, r.stderr)
                self.assertNotIn("Traceback", r.stderr)
                self.assertFalse(os.path.exists(dst) or os.path.exists(dst + ".partial"))
            r = self.run_converter(src, dst, "--kernel-args", "8kb")
            self.assertEqual(r.returncode, 1)
            self.assertIn("--kernel-args must be one of", r.stderr)
            open(os.path.join(d, "empty.jsonl"), "w").close()
            r = self.run_converter(os.path.join(d, "empty.jsonl"), dst)
            self.assertEqual(r.returncode, 1)
            self.assertIn("empty", r.stderr)
            self.assertFalse(os.path.exists(dst) or os.path.exists(dst + ".partial"))
            r = self.run_converter(src, src)
            self.assertEqual(r.returncode, 1)
            self.assertIn("must differ", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
