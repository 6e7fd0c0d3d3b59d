"""Reports of an analysis: terminal summary, self-contained HTML, Perfetto/Chrome trace."""

from syncpace.report.html import write_html
from syncpace.report.perfetto import write_perfetto
from syncpace.report.terminal import print_analysis

__all__ = ["print_analysis", "write_html", "write_perfetto"]
