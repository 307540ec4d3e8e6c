"""Training that produces DR-Venus checkpoints: the SFT data pipeline (trajectories in from journals, OpenAI-messages
and ShareGPT rows, cleaned into the trained protocol with a report, long ones resampled, tokenized with the
assistant mask: ``venus-edge train clean``), the SFT trainer (transformers + accelerate: ``venus-edge train sft``),
IGPO (rollouts through the agent loop on a transformers engine, information-gain turn rewards, group-normalized
discounted advantages, PPO-clip with KL: ``venus-edge train igpo``; rollouts on llama-server, vLLM or SGLang kept
serving the policy: ``rollout_servers``), the data as verl's parquet files (``venus-edge train export-verl``), and
a toy research world with tiny models to
run it all on a CPU (``scripts/toy_sft.sh``, ``scripts/toy_igpo.sh``).

    from venus_edge.train import CleanContext, clean_samples, load_samples, resample, tokenize_samples
    loaded = load_samples(["REDSearcher_SFT_10K.parquet", "runs/trajectories.jsonl"])
    samples, report = clean_samples(loaded.samples, CleanContext("2026-03-01"))
    samples, _ = resample(samples, seed=0)
    tokenized, rejected = tokenize_samples(samples, tokenizer, max_tokens=32768)   # a Hugging Face fast tokenizer

Every name a module of this package lists in its ``__all__`` is exported here, loaded on first use. Only the
trainers, the IGPO scoring and engine, and ``write_tiny_model`` import torch, transformers or the quantize extra,
when called.
"""

from typing import Any as _Any

from venus_edge.lazy import LazyExports as _LazyExports

_MODULE_EXPORTS = {
    "clean": ("RULES", "CleanContext", "CleanReport", "Judge", "clean_samples", "convert_search_results",
              "drop_duplicate_calls", "exact_match_judge", "fix_text", "keep_correct", "normalize_arguments",
              "parse_markdown_search", "prune_unknown_tools", "rebuild_turns", "set_system_prompt",
              "validate_structure"),
    "checkpoints": ("ProgressBar", "adamw", "check_finite", "check_finite_weights", "content_digest",
                    "end_processes", "fingerprint", "json_digest", "list_checkpoints", "resume", "save_checkpoint",
                    "save_final", "trim_step_log", "weight_decay_groups"),
    "compare": ("PairedDifference", "detectable_difference", "paired_bootstrap", "pooled_bootstrap", "read_scores",
                "required_pairs"),
    "config": ("ConfigFile", "DTYPES"),
    "data": ("LoadedData", "Rejected", "Sample", "load_samples", "sample_from_row"),
    "errors": ("ConfigError", "Dropped", "OracleGaveUp", "RolloutServerError", "TrainError"),
    "hf_engine": ("GenerationCall", "TransformersEngine"),
    "igpo": ("AdvantageStats", "NORMALIZATIONS", "TurnReward", "discounted_returns", "igpo_advantages",
             "information_gains", "low_variance_kl", "policy_loss", "turn_advantages"),
    "igpo_rollout": ("RecordingEngine", "Rollout", "TrainingSequence", "assemble", "outcome_score", "run_rollout",
                     "turn_rewards"),
    "igpo_scoring": ("PseudoAnswer", "cache_keyword", "pseudo_answer", "score_boundaries", "score_boundaries_directly"),
    "igpo_trainer": ("IGPOConfig", "IGPOResult", "train_igpo"),
    "resampling": ("DEFAULT_MULTIPLIERS", "DEFAULT_THRESHOLDS", "ResampleReport", "resample"),
    "rollout_servers": ("SERVER_KINDS", "RolloutServer", "SharedRolloutServer", "save_policy"),
    "sft": ("LORA_TARGETS", "LoraSettings", "SFTConfig", "SFTResult", "length_grouped_batches", "train_sft",
            "trained_added_tokens"),
    "tinymodel": ("COPY_PHASES", "copy_window", "pretrain_copying", "write_tiny_model"),
    "tokenize": ("TokenizedSample", "tokenize_messages", "tokenize_samples"),
    "verl_export": ("VERBATIM_CHAT_TEMPLATE", "VerlExport", "export_verl", "verl_rl_rows", "verl_sft_rows"),
    "toyworld": ("Person", "ToyQuestion", "ToyWorld", "generate_world", "oracle_policy",
                 "research_errors", "run_oracle"),
}
_EXPORTS = _LazyExports(__name__, _MODULE_EXPORTS)


def __getattr__(name: str) -> _Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
