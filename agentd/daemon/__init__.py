"""The daemon itself: its socket (listener, connections), the table of ops with each
op's request, handler and reply, chat turns, the agents it holds open, tool
approvals, the status and configuration it reports, deletion to the trash, the
OpenAI-compatible endpoint's keys and clients, the narrow interface its web view
sees it through, and when it collects its garbage.
"""
