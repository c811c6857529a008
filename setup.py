"""asct-jax: credit assignment for multi-turn LLM-agent RL in JAX (ASCT and FACTOR)."""
from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "chex==0.1.92",
    "numpy>=2.0",
    "transformers==5.24.0",
    "tokenizers==0.23.3",
    "ml_collections==1.1.0",
    "absl-py",
    "safetensors==0.8.0",
    "gguf==0.19.0",
    "sentencepiece",
    "matplotlib",
    "tqdm",
]

EXTRAS = {
    # Reference implementations used as oracles and benchmark baselines.
    "test": [
        "pytest",
        "pytest-xdist",
        "hypothesis",
        "torch==2.13.0",
        "mctx==0.0.71",
        "rlax==0.1.9",
    ],
    # Real text games (host adapters, not jittable).
    "games": ["textworld==1.7.0", "scienceworld==1.2.3"],
}
EXTRAS["all"] = sorted({p for v in EXTRAS.values() for p in v})

setup(
    name="asct-jax",
    version="0.1.0",
    description=__doc__,
    packages=find_packages(include=["asct_jax*", "factor_jax*", "experiments*"]),
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
)
