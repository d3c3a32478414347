"""The preview's planning: EC2's facts about the instance types, the model's architecture, and every check that
refuses a stack that cannot work, into the plan `__main__.py` builds. May import every other part of infra/.
"""
