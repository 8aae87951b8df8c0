"""The one `attnserve` command, above both sides: build commands (import, export, train) reach model/,
serve and client commands reach service/; each imports its side only when it runs."""
