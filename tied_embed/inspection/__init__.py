"""Inspecting a finished or running training run from its workdir alone: `inspector` the library calls (`inspect_run`,
`continue_prompt`), `report` the numbers (pure NumPy), `text` their plain text and Markdown, `plots` the pictures,
`cli` the command line."""
