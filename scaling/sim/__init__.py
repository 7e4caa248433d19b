"""Pure simulation of vLLM GPU pools: trace loaders, pool model, policies, replay (docs/simulator.md)."""
