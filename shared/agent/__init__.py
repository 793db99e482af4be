"""The agent loop and its tools: the same loop runs chat turns and reflection sub-agents."""
