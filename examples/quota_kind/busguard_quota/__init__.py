"""`quota`: an example busguard kind that lives outside busguard (docs/design.md, "Adding a kind")."""
