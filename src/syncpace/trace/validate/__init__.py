"""One validation layer for everything read from a run directory.

Three levels, each with one rule for what happens to damage:

* **Files.** Only regular files are opened, without blocking (a FIFO or a device in
  place of a trace file is refused, never read), and within a size bound
  (:data:`.files.MAX_META_BYTES`, :data:`.files.MAX_STREAM_BYTES`).
* **Metadata** (``rank-R.meta.json``) is decoded strictly: RFC 8259 JSON (no ``NaN``,
  no invalid UTF-8 or lone surrogates), then converted to typed, versioned structs
  (:class:`.metadata.RankMeta`). Wrong types, values out of range and unknown versions are a
  :class:`~syncpace.errors.TraceError`: one line naming the file, the key and the
  problem. Keys this version does not know are kept and ignored.
* **Columns** of the Arrow streams: the schema is checked as a whole (duplicate or
  missing columns, wrong types refuse the file); then every row is checked against
  the format's invariants (:func:`.rows.check_events`, :func:`.rows.check_steps`). Rows that break
  one are *quarantined*: left out of the tables and counted per reason, so analysis
  never works on them and the loss is reported, never silent.

What a file declares is checked against what it holds: a finished rank's
``events_written`` / ``steps_written`` against the rows found, and its streams'
end-of-stream marker. :class:`.completeness.RankCompleteness` carries the account of every rank:
declared, found, quarantined, dropped (buffer full), cut.

A module a job:

* :mod:`.files`: regular files only, opened without blocking, within a size bound.
* :mod:`.metadata`: rank and host metadata, strict and typed (msgspec).
* :mod:`.checksums`: what vouches for the bytes: the metadata's checksum, the streams
  that must carry one in every batch.
* :mod:`.stream`: one Arrow stream read batch by batch: schema, checksums, the cut.
* :mod:`.rows`: the row invariants and the quarantine.
* :mod:`.completeness`: the per-rank account, and the lines every verb prints of it.
"""
