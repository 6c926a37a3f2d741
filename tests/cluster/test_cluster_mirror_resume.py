"""kip mirror's transactional mode starts from its group's committed offsets; a group
coordinator that answers OffsetFetch with NOT_COORDINATOR (Apache Kafka does while a new
cluster's offsets topic is being created, or while the coordinator moves) is asked again
within the mirror's timeout instead of stopping the mirror. The errors are injected per API
by librdkafka's mock cluster, which Apache Kafka cannot be made to answer on demand.
"""

from __future__ import annotations

from mock_cluster import MockCluster

from kipproducer.mirror import Mirror
from kipproducer.mirror.topics import TopicPair
from kipproducer.mirror.writers import TransactionalWriter
from kipproducer.protocol.api_keys import OFFSET_FETCH
from kipproducer.protocol.error_codes import COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR


def test_resume_asks_again_while_the_group_coordinator_moves() -> None:
    with MockCluster(3) as cluster:
        cluster.create_topic("orders", 2)
        cluster.create_topic("copy.orders", 2)
        mirror = Mirror(cluster.bootstrap, cluster.bootstrap, "orders", mode="transactional",
                        group="mirror-resume", rename="copy.{topic}", progress=False,
                        timeout=20)
        writer = TransactionalWriter(mirror)
        try:
            cluster.push_request_errors(OFFSET_FETCH, [NOT_COORDINATOR,
                                                       COORDINATOR_LOAD_IN_PROGRESS,
                                                       NOT_COORDINATOR])
            pair = TopicPair("orders", "copy.orders", 2)
            starts = writer.resume([(pair, 0), (pair, 1)])
        finally:
            writer.close()
            mirror.close_probes()
            mirror.topics.close()
    # no offsets committed anywhere: each partition starts at the source's log start
    assert starts == {("orders", 0): 0, ("orders", 1): 0}
