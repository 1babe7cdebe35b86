"""The discrete-event core of the scale model: a clock, an event queue, and hosts that share
their cores between the jobs running on them.

Events at the same time run in the order they were scheduled (a sequence number breaks ties),
so a run is deterministic for a given seed. Everything else in bench/model builds on this.
"""

import heapq


class Simulator:
    """Event queue: schedule(delay, fn, *args) runs fn(*args) at now + delay."""

    def __init__(self):
        self.now = 0.0
        self._queue = []
        self._seq = 0
        self.events_run = 0

    def schedule(self, delay, fn, *args):
        if delay < 0:
            raise ValueError(f"cannot schedule {delay} s in the past")
        return self.at(self.now + delay, fn, *args)

    def at(self, time, fn, *args):
        if time < self.now:
            raise ValueError(f"cannot schedule at {time} s, now is {self.now} s")
        self._seq += 1
        entry = [time, self._seq, fn, args, True]
        heapq.heappush(self._queue, entry)
        return entry

    @staticmethod
    def cancel(entry):
        """A cancelled event stays in the heap but does nothing when its time comes."""
        if entry is not None:
            entry[4] = False

    def run(self, until=float("inf"), stop=None):
        """Run events up to `until` (s) or until stop() is true after an event."""
        while self._queue:
            time, _, fn, args, live = self._queue[0]
            if time > until:
                break
            heapq.heappop(self._queue)
            if not live:
                continue
            self.now = time
            self.events_run += 1
            fn(*args)
            if stop is not None and stop():
                return
        if until != float("inf"):
            self.now = max(self.now, until)


class Host:
    """A machine whose `cores` are shared between the jobs on it (processor sharing).

    A job needs `work` seconds at full speed on `threads` threads. While the threads of all
    jobs exceed the cores, every job slows by the same factor (cores / threads running), as
    the kernel's fair scheduler shares a loaded machine. On a GPU instance a host holds one job
    at a time and the factor stays 1. Each arrival or departure re-plans the finish times.
    """

    def __init__(self, sim, cores, name="host"):
        if cores <= 0:
            raise ValueError(f"host {name}: cores must be > 0, got {cores}")
        self.sim = sim
        self.cores = float(cores)
        self.name = name
        self._jobs = {}  # id -> [remaining work, threads, done callback, event]
        self._last = 0.0
        self._next_id = 0
        self.busy_core_seconds = 0.0

    def _rate(self):
        threads = sum(j[1] for j in self._jobs.values())
        return 1.0 if threads <= self.cores else self.cores / threads

    def _advance(self):
        elapsed = self.sim.now - self._last
        if elapsed > 0 and self._jobs:
            rate = self._rate()
            for job in self._jobs.values():
                job[0] -= elapsed * rate
                self.busy_core_seconds += elapsed * rate * job[1]
        self._last = self.sim.now

    def _replan(self):
        rate = self._rate()
        for jid, job in self._jobs.items():
            Simulator.cancel(job[3])
            job[3] = self.sim.schedule(max(job[0], 0.0) / rate, self._finish, jid)

    def submit(self, work, threads, done):
        """Start a job; done() is called when its work is finished. Returns its id."""
        if work < 0 or threads <= 0:
            raise ValueError(f"host {self.name}: bad job (work {work}, threads {threads})")
        self._advance()
        self._next_id += 1
        self._jobs[self._next_id] = [float(work), float(threads), done, None]
        self._replan()
        return self._next_id

    def time_left(self, jid):
        """Seconds until the job finishes if nothing else arrives or leaves."""
        self._advance()
        job = self._jobs.get(jid)
        return 0.0 if job is None else max(job[0], 0.0) / self._rate()

    def abort(self, jid):
        """Stop a job before it finishes (its node was interrupted); returns the work left."""
        if jid not in self._jobs:
            return None
        self._advance()
        job = self._jobs.pop(jid)
        Simulator.cancel(job[3])
        self._replan()
        return job[0]

    def _finish(self, jid):
        self._advance()
        job = self._jobs.pop(jid)
        self._replan()
        job[2]()
