"""A seeded simulator of HipsterShop that writes labelled dumps in the 2025 challenge layout."""
