"""Every `telesum` command, one module each (`summarize`, `worker`, `config`, `produce`, `schemas`,
`tail`, `probe`; `telesum bench` runs `worker.benchmarks`), with what only they use: the one start-up
sequence of the long-running commands (`startup`), the exit codes (`exit_codes`), the worker's
process supervisor (`supervisor`) and the sample generators of `produce` (`samples/`)."""
