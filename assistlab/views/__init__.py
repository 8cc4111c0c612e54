"""Pure functions of a report: Plotly figures and HTML panels (no gradio)."""
