"""Every `telesum` command, one module each (`summarize`, `worker`, `config`, `produce`, `schemas`,
`tail`, `probe`), with what only they use: the worker's process supervisor and the sample generators
of `produce`."""
