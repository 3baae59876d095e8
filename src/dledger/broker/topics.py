"""Topics as clients see them: auto-created on first send, with a default number of queues.

Nothing is stored for a topic. Any valid topic (``put_checks.topic_problem``) has
``queue_count`` queues, numbered from 0: ``DEFAULT_QUEUES`` (RocketMQ's default for an
auto-created topic, 4; a broker's ``--default-queues``) or more when messages were dispatched
to a higher queue id. So every replica answers the same for a topic, whichever node a producer
sent to first, and a route names queues a producer may send to before the topic has a message.

System topics (``RMQ_SYS_`` and ``%...%``: the broker's own records, such as the replicated
consumer state) are never offered to clients: ``is_system_topic`` says which, and
``known_topics`` leaves them out.
"""

from __future__ import annotations

from dledger.broker.put_checks import topic_problem

#: RocketMQ's default queue count for an auto-created topic (``defaultTopicQueueNums``)
DEFAULT_QUEUES = 4
#: the prefix of the broker's own topics (RocketMQ's ``TopicValidator.SYSTEM_TOPIC_PREFIX``)
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"


def is_system_topic(topic: str) -> bool:
    """Whether ``topic`` is one of the broker's own (clients neither send to nor read it)."""
    return topic.startswith(SYSTEM_TOPIC_PREFIX)


def queue_count(log, topic: str, default_queues: int = DEFAULT_QUEUES) -> int:
    """How many queues ``topic`` has: ``default_queues``, or the highest dispatched queue id
    plus one when that is more. An invalid topic has none."""
    if not isinstance(topic, str) or topic_problem(topic):
        return 0
    # one dict read (the reput service keeps the count per topic): no hop to the runtime
    return max(default_queues, log.reput.topic_queues.get(topic, 0))


def known_topics(log) -> list[str]:
    """The topics with dispatched messages on this replica, system topics left out, sorted."""
    topics = tuple(log.reput.topic_queues)      # a copy made under the GIL, from any thread
    return sorted(t for t in topics if not is_system_topic(t))
