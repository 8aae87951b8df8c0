"""The one `attnserve` command, above both sides: build commands (import, export, train) reach modelbuild/,
serve and client commands reach service/; each imports its side only when it runs."""
