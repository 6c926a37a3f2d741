"""The ApiVersions table this broker advertises: Apache Kafka 3.9's, as a 3.9 broker (KRaft
mode, the broker listener, default configuration) answers a client.

Every API the broker serves is advertised with exactly the 3.9 range (``api.handles`` refuses a
handler whose top version differs), so kafka-python and other clients that infer the broker's
release from ApiVersions see 3.9 (kafka-python looks for Fetch v17, added in 3.9).

Two deviations, both because advertising what cannot be served would break clients:

- API keys of the 3.9 table that this broker does not serve are left out
  (``NOT_SERVED``): a client that sees one advertised uses it and fails.
- Versions below the oldest one the protocol layer (kio, built from Kafka 4.x schemas) can
  decode are advertised, as 3.9 does, but refused if sent (the connection is closed with a log
  line, as Kafka 4.x does for the versions KIP-896 removed). Clients pick the highest common
  version, so only clients older than Kafka 2.1 / librdkafka 1.0 would send them; librdkafka
  before 2.11.1 needs those low MinVersions advertised to enable features by overlap.

The telemetry APIs (71, 72) are not in the table: a 3.9 broker advertises them only when a
client metrics plugin is configured.
"""

from __future__ import annotations

from typing import Final

#: api_key -> (min, max) of a Kafka 3.9 broker listener.
KAFKA_3_9: Final[dict[int, tuple[int, int]]] = {
    0: (0, 11),  # Produce (v12, TV2, came with 4.0)
    1: (0, 17),  # Fetch
    2: (0, 9),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (0, 9),  # OffsetCommit
    9: (0, 9),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (0, 7),  # CreateTopics
    20: (0, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (0, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn
    27: (0, 1),  # WriteTxnMarkers
    28: (0, 4),  # TxnOffsetCommit
    29: (0, 3),  # DescribeAcls
    30: (0, 3),  # CreateAcls
    31: (0, 3),  # DeleteAcls
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (0, 2),  # AlterReplicaLogDirs
    35: (0, 4),  # DescribeLogDirs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    38: (0, 3),  # CreateDelegationToken
    39: (0, 2),  # RenewDelegationToken
    40: (0, 2),  # ExpireDelegationToken
    41: (0, 3),  # DescribeDelegationToken
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    55: (0, 2),  # DescribeQuorum
    57: (0, 1),  # UpdateFeatures
    60: (0, 1),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    64: (0, 0),  # UnregisterBroker
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions
    68: (0, 0),  # ConsumerGroupHeartbeat
    69: (0, 0),  # ConsumerGroupDescribe
    74: (0, 0),  # ListClientMetricsResources
    75: (0, 0),  # DescribeTopicPartitions
    80: (0, 0),  # AddRaftVoter
    81: (0, 0),  # RemoveRaftVoter
}

#: 3.9 APIs this broker does not serve, so does not advertise, and why.
NOT_SERVED: Final[dict[int, str]] = {
    38: "delegation tokens are not implemented",
    39: "delegation tokens are not implemented",
    40: "delegation tokens are not implemented",
    41: "delegation tokens are not implemented",
    49: "client quotas are not kept (DescribeClientQuotas answers none)",
    55: "there is no KRaft quorum",
    57: "there are no finalized features to update",
    64: "there is no controller to unregister from",
    68: "KIP-848 consumer groups are not implemented",
    69: "KIP-848 consumer groups are not implemented",
    80: "there is no KRaft quorum",
    81: "there is no KRaft quorum",
}
