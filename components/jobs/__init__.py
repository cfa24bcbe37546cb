"""The jobs wing: what a training job is, one module per kind behind one interface (kind.py,
kinds.py), the pod spec every kind shares (pods.py), HyperPod's overlay (hyperpod.py), VERL on the
Ray kinds (verl.py), and the component that launches a job of any kind (training_job.py)."""
