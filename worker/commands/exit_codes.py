"""The exit codes of every `telesum` command, in one place (docs/operations.md lists them)."""

EXIT_OK = 0
EXIT_DRAINED = 0    # `telesum worker`: every in-flight record answered and committed
EXIT_FAILED = 1     # the command ran but not everything succeeded: rejected records, unacknowledged sends,
                    # a supervised child that failed, stale schemas, a probe that found no safe budget
EXIT_SETTINGS = 2   # an operator's mistake before any work: a setting, flag, model or input path is invalid
EXIT_DEADLINE = 3   # `telesum worker`: the drain deadline hit with work in flight; its new owner replays it
EXIT_FENCED = 4     # `telesum worker`, exactly-once: another worker with this transactional id took over
EXIT_MISSING_CODEC = 5  # `telesum worker`: a compression codec's library is missing (--allow-missing-codecs starts anyway)
EXIT_UNDECODABLE = 6    # `telesum worker`, on_undecodable_batch "exit": a batch could not be decoded; the others drained first
