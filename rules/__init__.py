"""Rules: analysed facts in, ranked findings out."""
