"""The parameters every serving suite takes (the load generator's), apart from ``loadgen.suite`` so a
suite module and ``benchrun validate`` read them without importing the load generator."""

COMMON_PARAMS = (
    "endpoint", "api", "model", "mix", "warmup", "seed", "workers", "request_timeout_s", "arrival",
    "ignore_eos", "server_kind", "refserver", "verdict", "tokenizer", "session_turns", "think_time_s", "shared_prefix",
    "server_metrics", "server_metrics_interval_s", "load_pods", "prompt_salt",
)
