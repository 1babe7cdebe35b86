#!/usr/bin/env python3
"""The terminal side of the console (issue 15), on a real pseudo-terminal (python's pty):

- `moerl up` on a terminal draws one progress line in place (iteration N/M with a bar,
  reward, samples/s, lost/dup, ETA; never wider than the terminal), with its event lines
  (the Spot notice) printed above it; through a pipe it prints plain lines, no escapes.
- `moerl console top` on a terminal redraws the nodes table, and q quits it, Ctrl-C quits it,
  both leaving the terminal as they found it; through a pipe it prints snapshots and ends by
  itself when the job is done.

Every wait is a liveness bound, not a timing check."""
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_console_test import BOUND_S, SMALL, up_run, wait_for  # noqa: E402

COLUMNS = 100
ITERATIONS = 24  # of the run on the terminal: the Spot notice (at 8) and redraws after it
FINISH_S = 300   # liveness bound of that run (the suite's machine may be heavily loaded)


class on_pty:
    """A process whose stdin, stdout and stderr are a new pseudo-terminal of COLUMNS columns,
    which is its controlling terminal (so Ctrl-C typed there is its SIGINT)."""

    def __init__(self, argv, cwd):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
        self.slave = slave
        self.p = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                                  start_new_session=True,
                                  preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        self.out = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every process holding the slave has gone
                return
            if not chunk:
                return
            self.out += chunk

    def text(self):
        return self.out.decode(errors="replace")

    def summary(self):
        """What a failure shows: every line but the redraws, and the last redraw."""
        segs = [seg for l in self.text().replace("\r\n", "\n").split("\n") for seg in l.split("\r\x1b[K")]
        kept = [seg for seg in segs if seg and "iteration " not in seg]
        return "\n".join(kept[-80:] + [seg for seg in segs if "iteration " in seg][-1:])

    def type(self, keys):
        os.write(self.master, keys)

    def finish(self, bound=BOUND_S):
        try:
            rc = self.p.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, 9)
            self.p.wait()
            sys.exit(f"FAIL: {self.p.args[1:3]} did not end within {bound} s:\n{self.summary()}")
        lflag = termios.tcgetattr(self.slave)[3]
        os.close(self.slave)
        self.reader.join(timeout=10)
        os.close(self.master)
        return rc, lflag


def check_up_on_terminal(up, rc):
    out = up.text()
    assert rc == 0, f"moerl up exited {rc}:\n{up.summary()}"
    lines = out.replace("\r\n", "\n").split("\n")
    # The progress: one terminal line redrawn in place ("\r" + erase line), not a line each.
    progress = [l for l in lines if re.search(r"iteration \d+/%d \[" % ITERATIONS, l)]
    redraws = [seg for l in progress for seg in l.split("\r\x1b[K") if "iteration " in seg]
    assert len(redraws) >= 2, out[-3000:]
    for seg in redraws:
        assert len(seg) < COLUMNS, f"a progress line wider than the terminal: {seg!r}"
        # A narrow terminal drops the reward's bounds, then the prefix, never lost/dup/ETA.
        assert re.match(r"(moerl up: )?iteration \d+/%d \[[#.]{20}\]  reward .*  lost \d+  dup \d+ .*ETA " % ITERATIONS, seg), seg
    assert "samples/s" in redraws[-1] and "lost 0  dup 0" in redraws[-1], redraws[-1]
    last = re.search(r"iteration (\d+)/%d \[#{20}\]" % ITERATIONS, redraws[-1])
    assert last and int(last.group(1)) >= ITERATIONS and "ETA 0:00" in redraws[-1], redraws[-1]
    # The Spot notice went above the line: a line of its own, and the progress carried on.
    notice = [i for i, l in enumerate(lines) if ">>> injected a Spot interruption notice" in l]
    # (erasing the progress line first: what follows the last erase is the notice alone)
    assert notice and lines[notice[0]].split("\r\x1b[K")[-1].startswith("moerl up: >>>"), out[-3000:]
    assert any(re.search(r"iteration \d+/%d" % ITERATIONS, l) for l in lines[notice[0] + 1:]), out[-3000:]
    assert re.search(r"moerl up: finished after", out), out[-3000:]
    print(f"up on a terminal: {len(redraws)} in-place redraws on {len(progress)} terminal "
          f"line(s); {sum(1 for l in lines if '>>>' in l)} event line(s) above them", flush=True)


def check_top_quits(moerl, console, cwd, keys, how):
    """`moerl console top` on a terminal against an endless run's `console`: a redrawn frame
    listing the nodes, then `keys` quit it. The run must outlast both tops (top ends by itself
    at the job's done), so it is one that never ends on its own (a 24-iteration run once
    could: two tops of three 0.5 s frames each beside 24 iterations of ~0.2 s)."""
    top = on_pty([moerl, "console", "--connect", console, "top", "--interval", "0.5"], cwd)
    # A second frame (so it redraws) that lists the nodes (they join after the console answers).
    frames = lambda: top.text().split("\x1b[H\x1b[2J")[1:]
    wait_for(f"a redrawn frame of top listing the nodes ({how})", lambda: len(frames()) >= 2 and any(
        "trainer-0" in f and "rollout-0" in f for f in frames()[1:-1]))
    frame = [f for f in frames()[1:-1] if "trainer-0" in f and "rollout-0" in f][-1]
    assert re.search(r"iteration \d+/\d+", frame) and "NAME" in frame, frame
    top.type(keys)
    rc, lflag = top.finish(bound=30)
    assert rc == 0, f"top after {how} exited {rc}:\n{top.text()[-2000:]}"
    assert top.text().endswith("\x1b[?25h"), "the cursor is shown again: " + repr(top.text()[-200:])
    assert lflag & termios.ICANON and lflag & termios.ECHO, f"the terminal's modes are back after {how}"
    print(f"top on a terminal: quit by {how}, terminal restored", flush=True)


def main(moerl, artifacts):
    import shutil
    import tempfile
    # The runs' logs stay here (a failure's evidence).
    shutil.rmtree(artifacts, ignore_errors=True)
    os.makedirs(artifacts)
    with tempfile.TemporaryDirectory() as tmp:
        # A pipe: plain lines, one per iteration at most, no terminal escapes.
        r = subprocess.run([moerl, "up", "--no-interrupt", "--iterations", "6", "--run-dir", os.path.join(artifacts, "piped"),
                            *SMALL], cwd=tmp, capture_output=True, text=True, timeout=BOUND_S)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "\r" not in r.stdout and "\x1b" not in r.stdout, repr(r.stdout[-2000:])
        piped = [l for l in r.stdout.splitlines() if l.startswith("moerl up: iteration ")]
        assert piped and all(re.match(r"moerl up: iteration \d+/6 \[[#.]{20}\]", l) for l in piped), piped
        iters = [int(re.match(r"moerl up: iteration (\d+)/", l).group(1)) for l in piped]
        # (the policy version may end one past the target: the trainer's flush of the last groups)
        assert iters == sorted(iters) and iters[-1] >= 6, iters
        print(f"up through a pipe: {len(piped)} line(s) for 6 iterations", flush=True)

        # top on a terminal, quit by q and by Ctrl-C, against a run that ends only when stopped.
        endless = up_run(moerl, tmp, os.path.join(artifacts, "top"))
        try:
            console = wait_for("the endless run's console line",
                               lambda: endless.find(r"console at (tcp://\S+) ")).group(1)
            check_top_quits(moerl, console, tmp, b"q", "q")
            check_top_quits(moerl, console, tmp, b"\x03", "Ctrl-C")
        finally:
            endless.stop()

        up = on_pty([moerl, "up", "--iterations", str(ITERATIONS), "--run-dir", os.path.join(artifacts, "tty"),
                     *SMALL], tmp)
        m = wait_for("the console line", lambda: re.search(r"console at (tcp://\S+) ", up.text()))
        console = m.group(1)
        # top through a pipe ends by itself at done, so it watches this run, which ends.
        piped_top = subprocess.Popen([moerl, "console", "--connect", console, "top", "--interval", "1"],
                                     cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        rc, _ = up.finish(bound=FINISH_S)
        check_up_on_terminal(up, rc)
        out, err = piped_top.communicate(timeout=FINISH_S)
        assert piped_top.returncode == 0, (piped_top.returncode, out[-2000:], err)
        assert "\x1b" not in out, repr(out[-500:])
        snapshots = out.count("\n--- ")  + out.startswith("--- ")
        assert snapshots >= 1 and "NAME" in out and out.rstrip().endswith("the job is done"), out[-2000:]
        assert "done yes" in out.split("--- ")[-1], out[-2000:]
        print(f"top through a pipe: {snapshots} snapshot(s), ended by itself when the job was done",
              flush=True)
    print("terminal checks passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
