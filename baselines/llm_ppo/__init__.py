"""CUDA Agent's training recipe for a Hugging Face causal LM acting in ``CudaKernel-v0``: multi-turn PPO with a
critic, warmed up in stages (single-turn RL, rejection fine-tuning, value pretraining, agentic PPO).
``cudagym baselines llm-ppo`` runs it; ``docs/ppo.md`` says how and what a run shows."""

from cudagym.baselines.llm_ppo.config import PPOSettings, Stage, StageResult
from cudagym.baselines.llm_ppo.policy import Policy, load_policy
from cudagym.baselines.llm_ppo.recipe import RecipeReport, RecipeSpec, run_recipe, scripted_rft_data

__all__ = [
    "PPOSettings",
    "Policy",
    "RecipeReport",
    "RecipeSpec",
    "Stage",
    "StageResult",
    "load_policy",
    "run_recipe",
    "scripted_rft_data",
]
