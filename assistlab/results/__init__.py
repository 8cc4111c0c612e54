"""What a comparison measured, as data: the report, its statistics, the cost model, workload figures (no gradio)."""
