"""The Prometheus exposition of a live run (`--prom-textfile DIR`, `--prom-listen [HOST:]PORT`): what the supervisor
samples, as metrics the cluster's own Prometheus reads. It runs in the supervisor only, never in the training's
process tree, and a failure of it is a probe problem, never the run's end."""
