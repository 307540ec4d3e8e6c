"""SFT and IGPO training for DR-Venus checkpoints (not built yet: see the project's open issues)."""
