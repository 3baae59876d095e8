"""Consumer groups: who heartbeats in which group, and what each group subscribes to.

HEART_BEAT (34) carries a JSON body ``{"clientID", "consumerDataSet": [{"groupName",
"subscriptionDataSet": [{"topic", "subString"}, ...]}, ...], "producerDataSet": [...]}``;
GET_CONSUMER_LIST_BY_GROUP (38) answers ``{"consumerIdList": [...]}`` with the client ids that
heartbeat in the group (the clients rebalance their queues over that list: a client missing
from it is assigned no queue); UNREGISTER_CLIENT (35) removes a client. A client also leaves its
groups when the connection it heartbeat on closes, or when it has not heartbeat for
``EXPIRE_S`` (RocketMQ's 120 s channel expiry). The registry is this broker's alone (as in
RocketMQ, where each broker keeps the consumers that heartbeat to it): clients heartbeat to
every master, so a new master learns them within one heartbeat interval.
"""

from __future__ import annotations

import json
import time

from dledger.broker.remoting import codes
from dledger.broker.remoting.fields import BadField, json_body, text

EXPIRE_S = 120.0


class ConsumerGroups:
    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        #: group -> client id -> (last heartbeat, connection id)
        self.clients: dict[str, dict[str, tuple[float, int]]] = {}
        #: (group, topic) -> the subscription expression of the last heartbeat
        self.subscriptions: dict[tuple[str, str], str] = {}

    def heartbeat(self, body: bytes, conn_id: int) -> None:
        data = json_body(body, "heartbeat")
        if not isinstance(data, dict):
            raise BadField(f"heartbeat: the body is a JSON {type(data).__name__}, not an object")
        client = data.get("clientID")
        if not isinstance(client, str) or not client:
            raise BadField("heartbeat: clientID is missing")
        groups = data.get("consumerDataSet") or []
        if not isinstance(groups, list):
            raise BadField("heartbeat: consumerDataSet must be a list")
        now = self.clock()
        for g in groups:
            name = g.get("groupName") if isinstance(g, dict) else None
            if not isinstance(name, str) or not name:
                raise BadField("heartbeat: a consumerDataSet entry has no groupName")
            self.clients.setdefault(name, {})[client] = (now, conn_id)
            for sub in g.get("subscriptionDataSet") or []:
                if isinstance(sub, dict) and isinstance(sub.get("topic"), str):
                    expr = sub.get("subString")
                    self.subscriptions[(name, sub["topic"])] = expr if isinstance(expr, str) else "*"

    def members(self, group: str) -> list[str]:
        """The live client ids of ``group``, sorted (expired ones are dropped here)."""
        members = self.clients.get(group, {})
        limit = self.clock() - EXPIRE_S
        for client in [c for c, (seen, _conn) in members.items() if seen < limit]:
            del members[client]
        return sorted(members)

    def unregister(self, client: str, group: str | None) -> None:
        for name in ([group] if group else list(self.clients)):
            self.clients.get(name, {}).pop(client, None)

    def connection_closed(self, conn_id: int) -> None:
        for members in self.clients.values():
            for client in [c for c, (_seen, conn) in members.items() if conn == conn_id]:
                del members[client]

    def subscription(self, group: str, topic: str) -> str | None:
        return self.subscriptions.get((group, topic))


async def handle_groups(ctx, cmd, conn_id: int):
    groups: ConsumerGroups = ctx.groups
    if cmd.code == codes.HEART_BEAT:
        groups.heartbeat(cmd.body, conn_id)
        return cmd.reply(codes.SUCCESS)
    if cmd.code == codes.UNREGISTER_CLIENT:
        groups.unregister(text(cmd.ext, "clientID"), cmd.ext.get("consumerGroup") or None)
        return cmd.reply(codes.SUCCESS)
    group = text(cmd.ext, "consumerGroup")
    members = groups.members(group)
    if not members:
        return cmd.reply(codes.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return cmd.reply(codes.SUCCESS, body=json.dumps({"consumerIdList": members}).encode())


__all__ = ["EXPIRE_S", "ConsumerGroups", "handle_groups"]
