"""Extraction: a body in hand becomes what an agent asked for. Pure code, no network.

It imports the guard's ``_limits`` and ``_errors`` at most, never fetching or the browser
(``tests/core/test_layout.py`` holds that), because it runs in worker processes on untrusted
bytes. ``_options`` validates a target's options; ``_shape`` decodes a body and dispatches on
the mode and formats (text, Markdown, clean HTML, links and metadata from one parse); ``_html``
parses HTML and walks the tree for ``_html_writer``, which writes text or Markdown (with
``_html_tables`` and ``_html_tags``; ``_html_clean`` and ``_html_meta`` read the same tree);
``_pdf`` reads PDF pages; ``_question`` picks the passages that answer a question;
``_isolate`` runs the shaping in worker processes with CPU and memory limits, and
``_worker`` is what those processes run (no Trio: see its docstring).
"""
