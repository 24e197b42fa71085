"""n-gram lookup: Goodput with a lower prior_alpha (0.5 default, 0.3, 0.2, 0.1), replayed on
session 24's position tables (309 prompts, batch 1) at three pass-cost curves, 40 and 80
new tokens. PYTHONPATH=. python data/goodput-positions-s29/study_prior.py (~1 min)."""
import sys
sys.path.insert(0, "data/goodput-positions-s27")
from replay_table import print_table
from specsim import policies as P
variants = {f"prior_alpha {a}": (P.Goodput, dict(prior_alpha=a, p_min=0.2)) for a in (0.5, 0.3, 0.2, 0.1)}
print_table("variant", variants, ["ngram"], ["kernel", "demo-s27", "xla"], [40, 80])
