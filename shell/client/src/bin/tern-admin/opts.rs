//! Options that several commands take with the same letter, name and help text
//! (mqadmin's wording), written once. Options only one command family shares stay in
//! that family's module.

use crate::{Opt, val};

/// `-t`: the topic the command acts on.
pub const TOPIC: Opt = val('t', "topic", true, "topic name");
/// `-g` as updateSubGroup, setConsumeMode and consumerProgress name it.
pub const GROUP_NAME: Opt = val('g', "groupName", true, "consumer group name");
/// `-g` as consumerConnection and consumerStatus name it.
pub const CONSUMER_GROUP: Opt = val('g', "consumerGroup", true, "consumer group name");
/// `-b`: one broker by address (brokerStatus and the consume-queue clean-ups).
pub const BROKER_ADDR: Opt = val('b', "brokerAddr", false, "Broker address");
/// `-c`: the cluster to list or look in.
pub const CLUSTER_NAME: Opt = val('c', "clusterName", false, "which cluster");
/// `-b`: the broker an update goes to (updateBrokerConfig and the ACL updates).
pub const UPDATE_BROKER: Opt = val('b', "brokerAddr", false, "update which broker");
/// `-c`: the cluster whose brokers an update goes to.
pub const UPDATE_CLUSTER: Opt = val('c', "clusterName", false, "update which cluster");
/// `-k`: a configuration key (updateBrokerConfig, updateNamesrvConfig).
pub const CONFIG_KEY: Opt = val('k', "key", true, "config key");
/// `-v`: the value for [`CONFIG_KEY`].
pub const CONFIG_VALUE: Opt = val('v', "value", true, "config value");
