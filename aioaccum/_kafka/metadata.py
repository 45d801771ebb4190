"""Cluster metadata for many topics: new topics asked for alone, refreshes in bounded parts.

Theory of operation (Java: ``ProducerMetadata.newTopics`` and ``Metadata``'s partial updates,
from KIP-526). aiokafka's client keeps one set of tracked topics and answers every need for
metadata with a request naming all of them, whose answer replaces the whole cluster view. A
producer that sends to N new topics one after the other then pays N rounds naming 1, 2, ... N
topics. Here instead:

* **New topics** (:meth:`MetadataClient.request_update_for_new_topic`) join the tracked set
  quietly and wait in a queue. One task drains the queue: everything queued when it runs goes
  out at once, in requests of at most ``max_topics_per_request`` topics, and each answer is
  *merged* into the cluster view (:meth:`MergingClusterMetadata.apply` with ``keep=None``):
  the topics it names are replaced, all others stay. Waiters arriving while a request is in
  flight go out together in the next one.
* **Full refreshes** (aiokafka's periodic or forced update, which calls ``_metadata_update``)
  name the tracked topics only, and none when none is tracked (Java asks for none; aiokafka
  would ask for every topic of the cluster). More than ``max_topics_per_request`` topics are
  asked in parts, all at once; the view changes only when every part was answered, so no
  topic vanishes because one part failed. A topic tracked while the refresh was in flight
  (merged by a new-topics request meanwhile) keeps its entry: the refresh never named it.

Answers are parsed by aiokafka's own ``ClusterMetadata.update_metadata`` into a scratch
instance (same errors, same logs, same unauthorized set), and their entries installed here.
A merge copies the maps of topics and of leaders but reuses every untouched topic's entries,
so merging one new topic into thousands stays far cheaper than the round trip that brought it.
The listeners (the adapter's caches) run after every change, merged or full.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Collection, Sequence
from typing import Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from aioaccum._kafka.logs import Throttle, demote_aiokafka_noise

__all__ = ["MAX_TOPICS_PER_REQUEST", "MergingClusterMetadata", "MetadataClient"]

MAX_TOPICS_PER_REQUEST = 500
"""The most topics one metadata request names; more are asked in several requests."""

_BOOTSTRAP = ("bootstrap", ConnectionGroup.DEFAULT)

# partitions per topic, partitions per leader, unauthorized topics, internal topics
_View = tuple[dict[str, dict[int, Any]], dict[Any, set[TopicPartition]], set[str], set[str]]

log = logging.getLogger(__name__)


class MergingClusterMetadata(ClusterMetadata):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's cluster view, which can also take answers naming only some of its topics.

    Reads (``partitions_for_topic``, ``leader_for_partition``, ...) are aiokafka's. The maps
    read by them are replaced whole, never changed in place, so a thread reading the view
    sees it before or after an update, not halfway.
    """

    _future: Any  # aiokafka's: the waiter for the next full refresh, if any

    def apply(
        self,
        responses: Sequence[Any],
        *,
        keep: Collection[str] | None,
        full: bool,
    ) -> bool:
        """Install the topics the ``responses`` name, and publish the new view to listeners.

        Args:
            responses: MetadataResponses, each with the brokers of the cluster.
            keep: which of the current topics stay besides those answered; None: every one
                not answered (a merge).
            full: whether this is a full refresh (it then counts as the view's last refresh).

        Returns:
            False, changing nothing, if a response listed no brokers.
        """
        parsed = []
        answered: set[str] = set()
        for response in responses:
            scratch = ClusterMetadata(**self.config)
            scratch.update_metadata(response)  # warns itself about a response with no brokers
            if not scratch._brokers:
                return False
            parsed.append(scratch)
            answered.update(topic_data[1] for topic_data in response.topics)

        if keep is None:
            partitions, led, unauthorized, internal = self._without(answered)
        else:
            partitions, led, unauthorized, internal = self._only(keep, answered)
        for scratch in parsed:
            partitions.update(scratch._partitions)
            for node, owned in scratch._broker_partitions.items():
                # A new set: the old one may be shared with the view being replaced.
                led[node] = led[node] | owned
            unauthorized |= scratch.unauthorized_topics
            internal |= scratch.internal_topics
        newest = parsed[-1]

        with self._lock:
            self._brokers = newest._brokers
            self.controller = newest.controller
            self._partitions = partitions
            self._broker_partitions = led
            self.unauthorized_topics = unauthorized
            self.internal_topics = internal
            waiting: Any = None
            if full:
                waiting = self._future
                self._future = None
                self._need_update = False
        if full:
            self._last_refresh_ms = self._last_successful_refresh_ms = time.time() * 1000
            if waiting is not None:
                waiting.set_result(self)
        for listener in list(self._listeners):
            listener(self)
        return True

    def _without(self, answered: set[str]) -> _View:
        """The current view less the ``answered`` topics: copies of the maps, not the entries."""
        old = self._partitions
        partitions = dict(old)
        led: dict[Any, set[TopicPartition]] = collections.defaultdict(set, self._broker_partitions)
        copied: set[Any] = set()
        for topic in answered & old.keys():
            del partitions[topic]
            for meta in old[topic].values():
                if meta.leader == -1:
                    continue
                if meta.leader not in copied:
                    copied.add(meta.leader)
                    led[meta.leader] = set(led[meta.leader])
                led[meta.leader].discard(TopicPartition(topic, meta.partition))
        return (
            partitions,
            led,
            self.unauthorized_topics - answered,
            self.internal_topics - answered,
        )

    def _only(self, keep: Collection[str], answered: set[str]) -> _View:
        """The current view's entries for the ``keep`` topics not ``answered``."""
        old = self._partitions
        kept = [topic for topic in keep if topic not in answered]
        partitions = {topic: old[topic] for topic in kept if topic in old}
        led: dict[Any, set[TopicPartition]] = collections.defaultdict(set)
        for topic, entries in partitions.items():
            for meta in entries.values():
                if meta.leader != -1:
                    led[meta.leader].add(TopicPartition(topic, meta.partition))
        return (
            partitions,
            led,
            {topic for topic in kept if topic in self.unauthorized_topics},
            {topic for topic in kept if topic in self.internal_topics},
        )


class MetadataClient(AIOKafkaClient):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's client with metadata for new topics fetched on their own (see the module)."""

    def __init__(
        self, *, max_topics_per_request: int = MAX_TOPICS_PER_REQUEST, **settings: Any
    ) -> None:
        super().__init__(**settings)
        demote_aiokafka_noise()
        self.cluster = MergingClusterMetadata(metadata_max_age_ms=self._metadata_max_age_ms)
        self._max_topics = max_topics_per_request
        # New topic -> resolved once a request naming it was answered (or could not be sent);
        # in the order they came.
        self._new_topics: dict[str, asyncio.Future[None]] = {}
        self._new_topics_task: asyncio.Task[None] | None = None
        self._closed = False
        self._no_answer_log = Throttle()

    async def close(self) -> None:
        self._closed = True
        task, self._new_topics_task = self._new_topics_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await super().close()

    def request_update_for_new_topic(self, topic: str) -> asyncio.Future[None]:
        """Ask for ``topic``'s metadata in the next request for new topics.

        The topic is tracked from now on (full refreshes name it too) without starting a full
        refresh. The future is shared by every waiter for the topic: shield it before
        cancelling a wait. After :meth:`close` it never resolves.
        """
        self._topics.add(topic)
        future = self._new_topics.get(topic)
        if future is None:
            future = self._new_topics[topic] = asyncio.get_running_loop().create_future()
        if self._new_topics_task is None and not self._closed:
            self._new_topics_task = asyncio.create_task(self._fetch_new_topics())
        return future

    async def _fetch_new_topics(self) -> None:
        try:
            while self._new_topics:
                # One turn of the loop first: every sender ready to run adds its topic.
                await asyncio.sleep(0)
                batch, self._new_topics = self._new_topics, {}
                try:
                    await self._fetch(list(batch))
                finally:
                    # Answered or not: a waiter whose topic is still missing tries again.
                    for future in batch.values():
                        if not future.done():
                            future.set_result(None)
        finally:
            if self._new_topics_task is asyncio.current_task():
                self._new_topics_task = None

    async def _fetch(self, topics: list[str]) -> None:
        """Metadata for ``topics`` only, merged into the view once every part was answered or
        given up on (a part no node answered leaves its topics out)."""
        size = self._max_topics
        parts = [topics[i : i + size] for i in range(0, len(topics), size)]
        answers = await asyncio.gather(*(self._ask(part) for part in parts))
        responses = [answer for answer in answers if answer is not None]
        if responses and self.cluster.apply(responses, keep=None, full=False):
            self._close_bootstrap_connection()

    async def _metadata_update(self, cluster_metadata: Any, topics: Collection[str]) -> bool:
        """aiokafka's full refresh, asking for ``topics`` in parts and installing all at once."""
        if cluster_metadata is not self.cluster:  # fetch_all_metadata: a view of its own
            return bool(await super()._metadata_update(cluster_metadata, topics))
        asked = sorted(topics)
        parts = [asked[i : i + self._max_topics] for i in range(0, len(asked), self._max_topics)]
        answers = await asyncio.gather(*(self._ask(part) for part in parts or [[]]))
        if any(answer is None for answer in answers):
            cluster_metadata.failed_update(None)
            return False
        named = set(asked)
        # Tracked since the request went out (a new topic merged meanwhile): keep its entry.
        keep = [topic for topic in self._topics if topic not in named]
        if not self.cluster.apply(answers, keep=keep, full=True):
            return False
        self._close_bootstrap_connection()
        return True

    async def _ask(self, topics: list[str]) -> Any | None:
        """One MetadataRequest naming ``topics``, from the first node that answers; None if
        none does, or the answer lists no brokers (the cluster is still forming)."""
        # aiokafka's default for allow_auto_topic_creation, as in its own refreshes.
        request = MetadataRequest(topics)
        nodes: list[Any] = [broker.nodeId for broker in self.cluster.brokers()]
        if _BOOTSTRAP in self._conns:
            nodes.append(_BOOTSTRAP[0])
        random.shuffle(nodes)
        for node_id in nodes:
            try:
                response = await self.send(node_id, request)
            except (TimeoutError, KafkaError, OSError) as exc:
                log.debug("metadata request to node %s failed: %r", node_id, exc)
                continue
            return response if response.brokers else None
        # Waiters ask again every retry backoff while brokers are away: say so once a minute,
        # not ten times a second.
        held = self._no_answer_log.allow("metadata")
        if held is not None:
            log.warning(
                "no broker answered a metadata request (%d node(s) tried, naming %d topic(s)); "
                "retrying every retry_backoff_ms: are the brokers up, and is bootstrap_servers "
                "right?%s",
                len(nodes), len(topics),
                f" ({held} more unanswered request(s) since the last message)" if held else "",
            )
        return None

    def _close_bootstrap_connection(self) -> None:
        # As aiokafka does: the bootstrap connection is kept only until brokers are known.
        if _BOOTSTRAP in self._conns and self.cluster.brokers():
            self._conns.pop(_BOOTSTRAP).close()
