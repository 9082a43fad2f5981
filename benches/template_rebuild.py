"""How well a client that may send EMBEDDING rows rebuilds a stored template from rounded
distances (docs/gallery.md "What an answer tells of a stored face"): one basis query per
dimension, `1 - cosine(e_i, v) = 1 - v_i`, rounded to `distance_decimals`. Prints the mean
cosine of the rebuilt template to the stored one over 200 random unit templates.

    .venv/bin/python benches/template_rebuild.py
"""

import numpy as np


def rebuilt_cosine(rng: np.random.Generator, dim: int, decimals: int) -> float:
    stored = rng.standard_normal(dim)
    stored /= np.linalg.norm(stored)
    answered = np.round(1.0 - stored, decimals)  # the distance to each basis vector
    rebuilt = 1.0 - answered
    return float(rebuilt @ stored / np.linalg.norm(rebuilt))


def main() -> None:
    rng = np.random.default_rng(1)
    print("| distance_decimals | 128-d | 512-d |\n|---|---|---|")
    for decimals in (1, 2, 3):
        cosines = [np.mean([rebuilt_cosine(rng, dim, decimals) for _ in range(200)])
                   for dim in (128, 512)]
        print(f"| {decimals} | {cosines[0]:.5f} | {cosines[1]:.5f} |")


if __name__ == "__main__":
    main()
