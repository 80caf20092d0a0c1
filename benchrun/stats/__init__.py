"""Statistics on replicates: summaries, MAD outliers, intervals, the one-variable gate,
baseline comparison, change points (one launch = one replicate = one observation)."""
