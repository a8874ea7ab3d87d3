"""One module per capability of the agent, each holding its own state across cycles (as koordlet's qosmanager
has one plugin per strategy: koordinator's ``pkg/koordlet/qosmanager/plugins/``).

Each is asked, in the cycle's order, to decide from what was measured and then to act (or, in dry runs and
``once``, to say what it would do). Whether a capability runs at all is ``webhook.agent.coexistence``'s answer.
"""
