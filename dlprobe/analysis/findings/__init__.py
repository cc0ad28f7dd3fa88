"""One module per family of causes: find_*(run) -> list[Finding], built from measures; no family
imports another (an import-linter contract), fix texts two families give live in `common`."""
