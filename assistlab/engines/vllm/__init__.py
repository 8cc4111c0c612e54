"""The vLLM engine: arms timed through vLLM's OpenAI-compatible server, AssistLab's own or the operator's."""
