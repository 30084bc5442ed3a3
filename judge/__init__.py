"""The 2025 AIOps Challenge score of answer files, and a report of where and why they fail."""
