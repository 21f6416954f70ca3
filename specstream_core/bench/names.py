"""Names the bench commands list in their help (plain data: `--help` imports no torch)."""

ABLATIONS = ("gamma", "topk", "ns", "prune", "lookup", "draft")  # what `bench` varies, one at a time
DOC_BEGIN, DOC_END = "<!-- bench:begin -->", "<!-- bench:end -->"  # the generated section of a Markdown page
