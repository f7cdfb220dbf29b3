"""Generated prose: the haystack for the single-needle task.

No public-domain book reaches this machine through the package registries in a usable form, so
the prose is generated: grammatical sentences about a small invented town, drawn from a seeded
generator. It reads like narrative (unlike the repeated grass/sky filler) and holds no digits,
so a number hidden in it is the only one there.
"""

from __future__ import annotations

import random

NAMES = ("Ada", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Iris", "Jonas")
PLACES = ("the harbour", "the old mill", "the market", "the library", "the orchard", "the bridge")
ACTIONS = (
    "walked slowly towards",
    "told a long story about",
    "painted a picture of",
    "wrote a letter from",
    "remembered a winter at",
    "found an old map of",
    "sang quietly near",
    "argued with a stranger at",
)
DETAILS = (
    "The wind smelled of salt and rain.",
    "Nobody in the town could say when it had last been so quiet.",
    "A cart rattled past, loaded with apples and firewood.",
    "The bells rang for the evening, and the shops began to close.",
    "Somewhere a dog barked twice and then was still.",
    "The light over the hills turned from gold to grey.",
    "Children ran along the wall, shouting a song nobody else knew.",
    "The baker swept flour from the steps and looked at the sky.",
)
FEELINGS = ("glad", "tired", "curious", "uneasy", "hopeful", "restless")


def sentences(rng: random.Random, count: int) -> list[str]:
    """`count` sentences of plain narrative, deterministic for a given generator state."""
    out = []
    for _ in range(count):
        kind = rng.randrange(3)
        if kind == 0:
            out.append(f"{rng.choice(NAMES)} {rng.choice(ACTIONS)} {rng.choice(PLACES)}.")
        elif kind == 1:
            out.append(rng.choice(DETAILS))
        else:
            out.append(
                f"{rng.choice(NAMES)} felt {rng.choice(FEELINGS)} and thought of "
                f"{rng.choice(NAMES)}, who lived by {rng.choice(PLACES)}."
            )
    return out
