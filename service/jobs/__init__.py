"""Planning jobs: searches submitted over HTTP, run by workers, watched as they progress.

Modules: `tables` (the job and event rows), `store` (every read and write of them), `submit`
(a request to a job: normalise, hash, merge with an identical one), `execute` (one run of one
job: the search under a cancellation token and a progress sink, its events, its outcome),
`sweep` (a grid of plan jobs gathered into frontiers), `local` (the embedded runner: jobs
on threads of the service process, no broker), `queue` (the distributed runner:
procrastinate on the service's PostgreSQL), `runtime` (which runner the service starts) and
`worker` (the `atlas-planner worker` process). Must not: import the solver's search at
module level (only its light `cancel` and `progress` modules; the rest is imported when a
job runs).
"""
