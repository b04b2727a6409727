#!/usr/bin/python3
"""Run PyTorch's own distributed backend suite against the "xcoll" backend.

    /usr/bin/python3 tests/python/torch_suite.py -n 2 [-k PATTERN ...]
        [--report FILE.md] [--json FILE.json] [--timeout SEC]

PyTorch tests a backend with torch/testing/_internal/distributed/
distributed_test.py: one test class, each test spawning WORLD_SIZE
processes that call dist.init_process_group(BACKEND, init_method=file://).
This runner makes that work for a third-party backend without editing any
installed file; every change is made in-process, in the runner and in each
spawned rank (which re-imports this module):

1. ``import xcoll.torch`` registers the backend in every rank;
2. "xcoll" is added to DistTestCases.backend_feature "plugin", "ddp" and
   "subgroup" before the suite is imported (its decorators read them);
3. a stand-in for the ``expecttest`` module (not packaged in Debian 12);
4. Debian's torch 1.13 on Python 3.11 cannot import
   torch.distributed._shard (dataclasses reject an unhashable default
   instance since 3.11); while it is imported, such defaults become
   default_factory copies -- what the dataclass meant -- so the suite's DDP
   tests can import it.

Each test is reported as pass, skip (with the reason -- for a skip decided
inside a rank, the reason that rank gave) or fail.  Exit status: 0 when
nothing failed, 1 otherwise, 77 when torch is not installed.
"""
import argparse
import copy
import dataclasses
import json
import os
import sys
import tempfile
import time
import types
import unittest

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(os.path.dirname(_here))
sys.path.insert(0, os.path.join(_root, "python"))

if __name__ == "__main__":
    # Our options are parsed, then hidden from torch's common_utils (which
    # parses sys.argv at import, and whose argv the spawned ranks inherit).
    _ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _ap.add_argument("-n", "--world-size", type=int, default=2)
    _ap.add_argument("-k", dest="patterns", action="append", default=[],
                     help="run tests whose name contains PATTERN (repeatable)")
    _ap.add_argument("-x", dest="excludes", action="append", default=[],
                     help="skip tests whose name contains PATTERN")
    _ap.add_argument("--report", help="write a Markdown report here")
    _ap.add_argument("--json", help="write the results as JSON here")
    _ap.add_argument("--timeout", type=int, default=300,
                     help="per-test timeout in seconds (PyTorch's: 300)")
    _ap.add_argument("--list", action="store_true", help="list tests only")
    _ap.add_argument("-v", "--verbose", action="store_true")
    _ap.add_argument("--as-gloo", action="store_true",
                     help="diagnostic: run the suite as for gloo (so the "
                     "tests gated on that name run too) with every gloo "
                     "group created as an xcoll group")
    ARGS = _ap.parse_args()
    sys.argv = sys.argv[:1]
    os.environ["BACKEND"] = "gloo" if ARGS.as_gloo else "xcoll"
    os.environ["XCOLL_SUITE_AS_GLOO"] = "1" if ARGS.as_gloo else "0"
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="xcoll-suite-"))
    os.environ["XCOLL_SUITE_SKIPS"] = os.path.join(os.environ["TEMP_DIR"],
                                                   "rank-skips")
    os.makedirs(os.environ["XCOLL_SUITE_SKIPS"], exist_ok=True)

try:
    import torch  # noqa: F401
    import torch.distributed as dist
except ImportError as _e:
    print(f"SKIP: torch is not installed ({_e}); apt-get install python3-torch")
    sys.exit(77)
if not dist.is_available():
    print("SKIP: this torch has no torch.distributed")
    sys.exit(77)


# -------------------------------------------------------------- 3. expecttest
def _expecttest_stub():
    m = types.ModuleType("expecttest")
    m.ACCEPT = False

    class TestCase(unittest.TestCase):
        """The subset of expecttest.TestCase the suite's base class uses."""

        def assertExpectedInline(self, actual, expect, skip=0):
            self.assertEqual(str(actual).strip(), str(expect).strip())

        def assertExpectedRaisesInline(self, exc_type, callable, expect,
                                       *args, **kwargs):
            with self.assertRaises(exc_type) as cm:
                callable(*args, **kwargs)
            self.assertExpectedInline(str(cm.exception), expect)

    m.TestCase = TestCase
    return m


try:
    import expecttest  # noqa: F401
except ImportError:
    sys.modules["expecttest"] = _expecttest_stub()


# ------------------------------------------------------- 4. dataclass defaults
def _import_shard():
    """Import torch.distributed._shard with unhashable dataclass defaults
    turned into default_factory copies (Python >= 3.11 rejects them)."""
    orig = dataclasses._get_field

    def get_field(cls, a_name, *rest):
        default = cls.__dict__.get(a_name, dataclasses.MISSING)
        f = default if isinstance(default, dataclasses.Field) else None
        value = f.default if f is not None else default
        if value is not dataclasses.MISSING and \
                type(value).__hash__ is None and \
                dataclasses.is_dataclass(value):
            new = dataclasses.field(
                default_factory=lambda v=value: copy.deepcopy(v),
                init=f.init if f else True, repr=f.repr if f else True,
                hash=f.hash if f else None,
                compare=f.compare if f else True,
                metadata=f.metadata if f else None)
            setattr(cls, a_name, new)
        return orig(cls, a_name, *rest)

    dataclasses._get_field = get_field
    try:
        import torch.distributed._shard  # noqa: F401
    except Exception as e:  # noqa: BLE001 -- reported, DDP tests then fail
        print(f"warning: torch.distributed._shard still fails: {e}",
              file=sys.stderr)
    finally:
        dataclasses._get_field = orig


_import_shard()

# ---------------------------------------------------------------- 1. backend
import xcoll.torch  # noqa: E402,F401

if os.environ.get("XCOLL_SUITE_AS_GLOO") == "1":
    # Diagnostic mode (--as-gloo): c10d builds its gloo groups with this.
    import torch.distributed.distributed_c10d as _c10d

    class _AsGloo(xcoll.torch.ProcessGroupXcoll):
        def __init__(self, store, rank, size, timeout=None):
            super().__init__(store, rank, size, timeout)

        def _set_sequence_number_for_group(self):
            pass

    _c10d.ProcessGroupGloo = _AsGloo

# --------------------------------------------------- 2. features of "xcoll"
from torch.testing._internal import common_distributed as _cd  # noqa: E402

for _feature in ("plugin", "ddp", "subgroup"):
    _cd.DistTestCases.backend_feature[_feature].add("xcoll")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """As PyTorch's test/distributed/test_distributed_spawn.py."""

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def run_test(self, test_name, parent_pipe):
        # In a rank: remember why a test skipped itself (the parent only
        # sees a generic exit code).
        fn = getattr(self, test_name)

        def recorded():
            try:
                return fn()
            except unittest.SkipTest as e:
                d = os.environ.get("XCOLL_SUITE_SKIPS")
                if d:
                    with open(os.path.join(d, f"{test_name}.{self.rank}"),
                              "w") as f:
                        f.write(str(e))
                raise
        setattr(self, test_name, recorded)
        super().run_test(test_name, parent_pipe)


# ------------------------------------------------------------------ runner
class _Result(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.records = []
        self._t0 = 0.0

    def startTest(self, test):
        self._t0 = time.time()
        super().startTest(test)

    def _rec(self, test, status, detail=""):
        name = test.id().rsplit(".", 1)[-1]
        self.records.append({"test": name, "status": status,
                             "detail": detail,
                             "seconds": round(time.time() - self._t0, 2)})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._rec(test, "pass")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        name = test.id().rsplit(".", 1)[-1]
        d = os.environ["XCOLL_SUITE_SKIPS"]
        ranks = sorted(f for f in os.listdir(d) if f.startswith(name + "."))
        if ranks:
            with open(os.path.join(d, ranks[0])) as f:
                reason = f.read()
        self._rec(test, "skip", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._rec(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._rec(test, "fail", self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._rec(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._rec(test, "fail", "unexpected success")


def _report_md(records, world_size, elapsed):
    by = {"pass": [], "skip": [], "fail": []}
    for r in records:
        by[r["status"]].append(r)
    mode = " (run as gloo: --as-gloo)" if ARGS.as_gloo else ""
    lines = [f"# PyTorch distributed_test.py, backend xcoll{mode}, "
             f"{world_size} ranks",
             "",
             f"torch {torch.__version__}, Python "
             f"{sys.version.split()[0]}; {len(records)} tests in "
             f"{elapsed:.0f} s: {len(by['pass'])} passed, "
             f"{len(by['skip'])} skipped, {len(by['fail'])} failed.", ""]
    lines.append("## Failed")
    lines += [f"- `{r['test']}`: {r['detail'].strip().splitlines()[-1]}"
              for r in by["fail"]] or ["(none)"]
    lines += ["", "## Skipped (reason)"]
    reasons = {}
    for r in by["skip"]:
        reasons.setdefault(r["detail"].strip(), []).append(r["test"])
    for reason, tests in sorted(reasons.items(), key=lambda x: -len(x[1])):
        lines.append(f"- {reason} ({len(tests)}): " +
                     ", ".join(f"`{t}`" for t in sorted(tests)))
    lines += ["", "## Passed", ""]
    lines.append(", ".join(f"`{r['test']}`" for r in by["pass"]) or "(none)")
    return "\n".join(lines) + "\n"


def main():
    import torch.testing._internal.distributed.distributed_test as dt
    dt.DEFAULT_TIMEOUT = ARGS.timeout
    _cd.TIMEOUT_DEFAULT = ARGS.timeout
    for k in list(_cd.TIMEOUT_OVERRIDE):
        _cd.TIMEOUT_OVERRIDE[k] = min(_cd.TIMEOUT_OVERRIDE[k], ARGS.timeout)
    names = sorted(n for n in dir(TestDistBackendWithSpawn)
                   if n.startswith("test"))
    if ARGS.patterns:
        names = [n for n in names if any(p in n for p in ARGS.patterns)]
    names = [n for n in names if not any(p in n for p in ARGS.excludes)]
    if ARGS.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(verbosity=2 if ARGS.verbose else 1,
                                     resultclass=_Result, stream=sys.stdout)
    t0 = time.time()
    res = runner.run(suite)
    elapsed = time.time() - t0
    counts = {s: sum(r["status"] == s for r in res.records)
              for s in ("pass", "skip", "fail")}
    print(f"\nxcoll, {ARGS.world_size} ranks: {counts['pass']} passed, "
          f"{counts['skip']} skipped, {counts['fail']} failed "
          f"({elapsed:.0f} s)")
    for r in res.records:
        if r["status"] == "fail":
            print(f"FAILED {r['test']}")
    if ARGS.report:
        with open(ARGS.report, "w") as f:
            f.write(_report_md(res.records, ARGS.world_size, elapsed))
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump({"world_size": ARGS.world_size,
                       "torch": torch.__version__, "counts": counts,
                       "seconds": round(elapsed, 1),
                       "tests": res.records}, f, indent=1)
    return 0 if counts["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
