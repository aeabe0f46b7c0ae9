"""Task synthesis (``cudagym synth``): seed operators from the installed torch and transformers, composed into
KernelBench-format tasks, filtered by execution in the trusted reference process, decontaminated against
KernelBench, written as a parquet in Ops-6K's schema (see ``docs/synth.md``)."""
