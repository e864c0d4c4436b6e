//! The router's behaviour, written as a specification; the property test at the end checks the
//! trie and its cache against a brute-force scan with `semaq_wire::subject::matches`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;

use super::{Router, RouterError, RouterStats};

type Groups = BTreeMap<String, Vec<u32>>;

fn router() -> Router<u32> {
    Router::new(64)
}

fn plain(router: &Router<u32>, subject: &str) -> Vec<u32> {
    let mut plain = router.matches(subject).plain.clone();
    plain.sort_unstable();
    plain
}

fn groups(router: &Router<u32>, subject: &str) -> Groups {
    let result = router.matches(subject);
    let mut groups = Groups::new();
    for group in &result.groups {
        let mut members = group.members.clone();
        members.sort_unstable();
        let previous = groups.insert(group.name.to_string(), members);
        assert!(previous.is_none(), "queue name {} appears twice in one result", group.name);
    }
    groups
}

fn add(router: &Router<u32>, filter: &str, subscriber: u32) {
    assert_eq!(router.insert(filter, None, subscriber), Ok(()), "{filter}");
}

#[test]
fn the_router_is_shared_across_threads_when_its_subscribers_are() {
    fn shareable<S: Send + Sync>() {}
    shareable::<Router<Arc<str>>>();
    shareable::<Arc<super::Matches<Arc<str>>>>();
}

#[test]
fn every_subscriber_is_listed_once_up_to_the_bound() {
    let router = router();
    for (filter, subscriber) in [("a.b", 1), ("a.*", 2), ("a.>", 3), ("x", 4)] {
        add(&router, filter, subscriber);
    }
    router.insert("a.b", Some("q"), 5).unwrap();
    let mut all = router.subscribers(100);
    all.sort_unstable();
    assert_eq!(all, [1, 2, 3, 4, 5]);
    assert_eq!(router.subscribers(2).len(), 2);
    assert!(router.subscribers(0).is_empty());
}

#[test]
fn a_literal_filter_matches_only_the_same_subject() {
    let router = router();
    add(&router, "foo.bar", 1);
    assert_eq!(plain(&router, "foo.bar"), [1]);
    for other in ["foo", "foo.baz", "foo.bar.baz", "bar.foo", "foo.ba", "foo.barr"] {
        assert!(router.matches(other).is_empty(), "{other}");
    }
}

#[test]
fn a_star_matches_exactly_one_token_in_any_position() {
    let router = router();
    add(&router, "*.b.c", 1);
    add(&router, "a.*.c", 2);
    add(&router, "a.b.*", 3);
    assert_eq!(plain(&router, "a.b.c"), [1, 2, 3]);
    assert_eq!(plain(&router, "x.b.c"), [1]);
    assert_eq!(plain(&router, "a.x.c"), [2]);
    assert_eq!(plain(&router, "a.b.x"), [3]);
    for miss in ["a.b", "b.c", "a.b.c.d", "x.a.b.c"] {
        assert!(router.matches(miss).is_empty(), "{miss}");
    }
}

#[test]
fn a_tail_matches_one_or_more_trailing_tokens() {
    let router = router();
    add(&router, "foo.>", 1);
    add(&router, ">", 2);
    assert_eq!(plain(&router, "foo.bar"), [1, 2]);
    assert_eq!(plain(&router, "foo.bar.baz.qux"), [1, 2]);
    assert_eq!(plain(&router, "bar.foo"), [2]);
}

#[test]
fn a_tail_does_not_match_its_parent() {
    let router = router();
    add(&router, "foo.>", 1);
    add(&router, "foo.*", 2);
    assert!(router.matches("foo").is_empty());
}

#[test]
fn both_wildcards_work_together() {
    let router = router();
    add(&router, "*.orders.>", 1);
    add(&router, "*.*.>", 2);
    assert_eq!(plain(&router, "eu.orders.new"), [1, 2]);
    assert_eq!(plain(&router, "us.orders.new.urgent"), [1, 2]);
    assert_eq!(plain(&router, "eu.invoices.new"), [2]);
    assert!(router.matches("eu.orders").is_empty());
}

#[test]
fn tokens_that_merely_contain_wildcard_characters_are_literal() {
    let router = router();
    add(&router, "foo*.b>", 1);
    assert_eq!(plain(&router, "foo*.b>"), [1]);
    assert!(router.matches("fooX.b>").is_empty());
}

#[test]
fn a_queue_group_collects_its_members_apart_from_plain_subscribers() {
    let router = router();
    router.insert("work", Some("q"), 1).unwrap();
    router.insert("work", Some("q"), 2).unwrap();
    router.insert("work", Some("other"), 3).unwrap();
    add(&router, "work", 4);
    assert_eq!(plain(&router, "work"), [4]);
    assert_eq!(groups(&router, "work"), Groups::from([("other".into(), vec![3]), ("q".into(), vec![1, 2])]));
    assert_eq!(router.matches("work").fanout(), 3);
}

#[test]
fn the_same_queue_name_under_two_matching_filters_is_one_group_as_in_nats() {
    let router = router();
    router.insert("orders.*", Some("q"), 1).unwrap();
    router.insert("orders.new", Some("q"), 2).unwrap();
    router.insert("orders.>", Some("q"), 3).unwrap();
    assert_eq!(groups(&router, "orders.new"), Groups::from([("q".into(), vec![1, 2, 3])]));
    assert_eq!(groups(&router, "orders.old"), Groups::from([("q".into(), vec![1, 3])]));
}

#[test]
fn a_subscriber_under_two_matching_filters_appears_once_per_filter() {
    let router = router();
    add(&router, "a.*", 7);
    add(&router, "a.b", 7);
    assert_eq!(plain(&router, "a.b"), [7, 7]);
    assert_eq!(router.count(), 2);
}

#[test]
fn inserting_the_same_subscription_twice_changes_nothing() {
    let router = router();
    add(&router, "a.b", 1);
    let generation = router.generation();
    add(&router, "a.b", 1);
    assert_eq!((router.count(), router.generation()), (1, generation));
    assert_eq!(plain(&router, "a.b"), [1]);
    assert!(router.remove("a.b", None, &1));
    assert!(router.matches("a.b").is_empty());
}

#[test]
fn remove_takes_out_exactly_the_named_subscription() {
    let router = router();
    add(&router, "a.*", 1);
    add(&router, "a.*", 2);
    router.insert("a.*", Some("q"), 1).unwrap();
    router.insert("a.*", Some("q"), 3).unwrap();
    assert!(!router.remove("a.*", Some("other"), &1), "wrong queue");
    assert!(!router.remove("a.>", None, &1), "wrong filter");
    assert!(!router.remove("a.*", None, &3), "not a plain subscriber");
    assert!(router.remove("a.*", Some("q"), &1));
    assert!(!router.remove("a.*", Some("q"), &1), "already removed");
    assert_eq!(plain(&router, "a.x"), [1, 2]);
    assert_eq!(groups(&router, "a.x"), Groups::from([("q".into(), vec![3])]));
    assert!(router.remove("a.*", Some("q"), &3));
    assert!(groups(&router, "a.x").is_empty(), "an emptied group disappears");
    assert_eq!(router.count(), 2);
}

#[test]
fn removing_everything_prunes_the_trie_back_to_nothing() {
    let router = router();
    let filters = ["a", "a.b", "a.b.c", "a.*.c", "*.>", ">", "a.>", "_INBOX.x1", "_INBOX.x2", "*"];
    for round in 0..3 {
        for (i, filter) in filters.iter().enumerate() {
            add(&router, filter, i as u32);
            router.insert(filter, Some("q"), i as u32).unwrap();
        }
        assert_eq!(router.count(), 2 * filters.len());
        assert!(router.node_count() > 0);
        // Remove in a different order each round so pruning meets every shape.
        let mut order: Vec<usize> = (0..filters.len()).collect();
        order.rotate_left(round * 3);
        for i in order {
            assert!(router.remove(filters[i], None, &(i as u32)));
            assert!(router.remove(filters[i], Some("q"), &(i as u32)));
        }
        assert_eq!((router.count(), router.node_count()), (0, 0), "round {round}");
    }
}

#[test]
fn a_removal_that_finds_nothing_creates_no_nodes() {
    let router = router();
    assert!(!router.remove("a.b.c", None, &1));
    assert!(!router.remove("", None, &1));
    assert!(!router.remove("a.>.b", None, &1));
    assert_eq!(router.node_count(), 0);
}

#[test]
fn a_cached_subject_sees_a_new_subscriber() {
    let router = router();
    add(&router, "a.b", 1);
    assert_eq!(plain(&router, "a.b"), [1]);
    assert!(router.matches("x.y").is_empty());
    assert_eq!(router.cache_len(), 2);
    add(&router, "a.b", 2);
    add(&router, "*.y", 3);
    assert_eq!(plain(&router, "a.b"), [1, 2]);
    assert_eq!(plain(&router, "x.y"), [3]);
}

#[test]
fn a_cached_subject_forgets_a_removed_subscriber() {
    let router = router();
    add(&router, "a.b", 1);
    add(&router, "a.>", 2);
    router.insert("*.b", Some("q"), 3).unwrap();
    assert_eq!(router.matches("a.b").fanout(), 3);
    router.remove("a.>", None, &2);
    assert_eq!(plain(&router, "a.b"), [1]);
    router.remove("*.b", Some("q"), &3);
    assert!(groups(&router, "a.b").is_empty());
}

#[test]
fn a_change_keeps_cached_subjects_its_filter_cannot_match() {
    let router = router();
    add(&router, "a.b", 1);
    let before = router.matches("a.b");
    add(&router, "_INBOX.abc", 2);
    add(&router, "c.*", 3);
    router.remove("_INBOX.abc", None, &2);
    assert!(Arc::ptr_eq(&before, &router.matches("a.b")), "the cached result survived");
}

#[test]
fn the_cache_never_exceeds_its_bound() {
    let router = Router::new(10);
    add(&router, ">", 1);
    for i in 0..1000 {
        assert_eq!(plain(&router, &format!("subject.{i}")), [1]);
        assert!(router.cache_len() <= 10, "after {i}: {}", router.cache_len());
    }
    assert!(router.cache_len() >= 5, "eviction drops about half, not everything");
}

#[test]
fn a_full_cache_lets_a_subject_in_only_on_its_second_miss() {
    let router = Router::new(4);
    add(&router, ">", 1);
    for i in 0..4 {
        router.matches(&format!("filled.{i}"));
    }
    assert_eq!(router.cache_len(), 4);
    let first = router.matches("hot.subject");
    assert_eq!(router.cache_len(), 4, "a first miss leaves a full cache as it is");
    let second = router.matches("hot.subject");
    assert!(!Arc::ptr_eq(&first, &second), "the second lookup walked again");
    assert_eq!(router.cache_len(), 3, "the second miss evicted half and took a place");
    assert!(Arc::ptr_eq(&second, &router.matches("hot.subject")), "then it is a hit");
}

#[test]
fn one_shot_subjects_never_evict_a_full_cache() {
    let router = Router::new(64);
    add(&router, "kv.>", 1);
    for i in 0..64 {
        router.matches(&format!("kv.warm.{i}"));
    }
    let warm = router.matches("kv.warm.7");
    for i in 0..10_000 {
        assert_eq!(plain(&router, &format!("kv.key.{i}")), [1]);
    }
    assert_eq!(router.cache_len(), 64);
    assert!(Arc::ptr_eq(&warm, &router.matches("kv.warm.7")), "the warm subject stayed cached");
}

#[test]
fn a_zero_bound_disables_the_cache() {
    let router = Router::new(0);
    add(&router, "a", 1);
    assert_eq!(plain(&router, "a"), [1]);
    assert_eq!(plain(&router, "a"), [1]);
    assert_eq!(router.cache_len(), 0);
    assert_eq!(router.stats().cache_hit_rate, 0.0);
}

#[test]
fn invalid_filters_and_queue_names_are_rejected() {
    let router = router();
    for bad in ["", ".", "a.", ".a", "a..b", "a.>.b", ">.a", "a b", "a\tb"] {
        assert_eq!(router.insert(bad, None, 1), Err(RouterError::InvalidSubject), "{bad:?}");
    }
    for bad in ["", "q 1", "q\n"] {
        assert_eq!(router.insert("a", Some(bad), 1), Err(RouterError::InvalidQueue), "{bad:?}");
    }
    assert_eq!((router.count(), router.node_count(), router.generation()), (0, 0, 0));
}

#[test]
fn invalid_published_subjects_reach_nobody_and_are_not_cached() {
    let router = router();
    add(&router, ">", 1);
    for bad in ["", "a..b", ".a", "a.", "a b"] {
        assert!(router.matches(bad).is_empty(), "{bad:?}");
    }
    assert_eq!(router.cache_len(), 0);
}

#[test]
fn wildcard_tokens_in_a_published_subject_only_match_wildcard_filters() {
    let router = router();
    add(&router, "a.>", 1);
    add(&router, "a.*", 2);
    add(&router, "a.b", 3);
    let reached = |subject: &str| {
        let mut ids: Vec<u32> = router.matches(subject).plain.clone();
        ids.sort_unstable();
        ids
    };
    assert_eq!(reached("a.>"), [1, 2]);
    assert_eq!(reached("a.*"), [1, 2]);
}

#[test]
fn generation_bumps_on_every_change_and_only_then() {
    let router = router();
    assert_eq!(router.generation(), 0);
    add(&router, "a", 1);
    assert_eq!(router.generation(), 1);
    router.insert("a", Some("q"), 1).unwrap();
    assert_eq!(router.generation(), 2);
    router.matches("a");
    assert!(!router.remove("b", None, &1));
    assert_eq!(router.generation(), 2);
    assert!(router.remove("a", None, &1));
    assert_eq!(router.generation(), 3);
}

#[test]
fn stats_follow_nats_subsz() {
    let router = router();
    add(&router, "a.*", 1);
    add(&router, "a.b", 2);
    router.insert("a.b", Some("q"), 3).unwrap();
    router.insert("a.b", Some("q"), 4).unwrap();
    router.remove("a.b", Some("q"), &4);
    router.matches("a.b"); // miss: fanout 2 plain + 1 group
    router.matches("a.b"); // hit
    router.matches("a.c"); // miss: fanout 1
    router.matches("zzz"); // miss: fanout 0
    let stats = router.stats();
    assert_eq!(
        (stats.num_subscriptions, stats.num_cache, stats.num_inserts, stats.num_removes, stats.num_matches),
        (3, 3, 4, 1, 4)
    );
    assert_eq!((stats.cache_hit_rate, stats.max_fanout, stats.avg_fanout), (0.25, 3, 4.0 / 3.0));
    let json = serde_json::to_value(stats).unwrap();
    assert_eq!(json["num_subscriptions"], 3);
}

#[test]
fn a_walk_that_races_a_change_is_not_cached() {
    let router = router();
    add(&router, "a.b", 1);
    // A publisher walks the trie, then a subscriber arrives before it stores the result.
    let (stale, generation) = router.walk("a.b");
    add(&router, "a.*", 2);
    router.store("a.b", &stale, generation);
    assert_eq!(router.cache_len(), 0);
    assert_eq!(plain(&router, "a.b"), [1, 2]);
}

#[test]
fn concurrent_publishers_never_cache_a_stale_result() {
    let router = Router::new(4);
    let writers = 4;
    let per_writer = 200;
    std::thread::scope(|scope| {
        for w in 0..writers {
            let router = &router;
            scope.spawn(move || {
                for i in 0..per_writer {
                    let filter = if i % 2 == 0 { "a.*" } else { "a.b" };
                    router.insert(filter, None, w * per_writer + i).unwrap();
                }
            });
        }
        for _ in 0..2 {
            let router = &router;
            scope.spawn(move || {
                for i in 0..5_000 {
                    router.matches(if i % 3 == 0 { "a.c" } else { "a.b" });
                }
            });
        }
    });
    let expected: Vec<u32> = (0..writers * per_writer).collect();
    assert_eq!(plain(&router, "a.b"), expected);
    assert_eq!(plain(&router, "a.c").len(), expected.len() / 2);
}

/// One subscription in the model: (filter, queue, subscriber).
type Sub = (String, Option<String>, u32);

fn filter_strategy() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec!["a", "b", "c", "*"]);
    (prop::collection::vec(token, 1..4), any::<bool>()).prop_map(|(tokens, tail)| {
        let mut filter = tokens.join(".");
        if tail {
            filter.push_str(".>");
        }
        filter
    })
}

fn sub_strategy() -> impl Strategy<Value = Sub> {
    let queue = prop::option::of(prop::sample::select(vec!["q1".to_string(), "q2".to_string()]));
    (prop_oneof![filter_strategy(), Just(">".to_string())], queue, 0u32..6)
}

fn subject_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 1..6).prop_map(|tokens| tokens.join("."))
}

/// What a brute-force scan says `subject` reaches: sorted plain list and sorted groups.
fn brute_force(subs: &BTreeSet<Sub>, subject: &str) -> (Vec<u32>, Groups) {
    let mut plain = Vec::new();
    let mut groups = Groups::new();
    for (filter, queue, subscriber) in subs {
        if !semaq_wire::subject::matches(filter, subject) {
            continue;
        }
        match queue {
            None => plain.push(*subscriber),
            Some(name) => groups.entry(name.clone()).or_default().push(*subscriber),
        }
    }
    plain.sort_unstable();
    groups.values_mut().for_each(|members| members.sort_unstable());
    (plain, groups)
}

fn check_all(router: &Router<u32>, model: &BTreeSet<Sub>, subjects: &[String]) -> Result<(), TestCaseError> {
    for subject in subjects {
        let (want_plain, want_groups) = brute_force(model, subject);
        prop_assert_eq!(plain(router, subject), want_plain, "plain for {}", subject);
        prop_assert_eq!(groups(router, subject), want_groups, "groups for {}", subject);
    }
    Ok(())
}

proptest! {
    #[test]
    fn matches_agree_with_a_brute_force_scan_through_inserts_and_removes(
        subs in prop::collection::vec(sub_strategy(), 0..40),
        removals in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
        subjects in prop::collection::vec(subject_strategy(), 1..20),
        cache_entries_max in 0usize..8,
    ) {
        let router = Router::new(cache_entries_max);
        let mut model = BTreeSet::new();
        for (filter, queue, subscriber) in &subs {
            router.insert(filter, queue.as_deref(), *subscriber).unwrap();
            model.insert((filter.clone(), queue.clone(), *subscriber));
            // Match between changes so cached results must be invalidated correctly.
            check_all(&router, &model, &subjects[..1])?;
        }
        prop_assert_eq!(router.count(), model.len());
        check_all(&router, &model, &subjects)?;
        for index in removals {
            if subs.is_empty() {
                break;
            }
            let (filter, queue, subscriber) = index.get(&subs);
            let present = model.remove(&(filter.clone(), queue.clone(), *subscriber));
            prop_assert_eq!(router.remove(filter, queue.as_deref(), subscriber), present);
            check_all(&router, &model, &subjects)?;
        }
        prop_assert_eq!(router.count(), model.len());
        prop_assert!(router.cache_len() <= cache_entries_max);
        for (filter, queue, subscriber) in &model {
            prop_assert!(router.remove(filter, queue.as_deref(), subscriber));
        }
        prop_assert_eq!((router.count(), router.node_count()), (0, 0));
    }
}

#[test]
fn uncached_lookups_match_like_cached_ones_and_leave_the_cache_alone() {
    let router = router();
    add(&router, "replies.*", 1);
    assert_eq!(router.matches_uncached("replies.a").plain, [1]);
    assert_eq!(router.cache_len(), 0);
    router.matches("replies.b");
    assert_eq!(router.cache_len(), 1);
    assert_eq!(router.matches_uncached("replies.b").plain, [1]);
}

#[test]
fn reply_inboxes_are_matched_but_never_cached() {
    let router = router();
    add(&router, "_INBOX.client.*", 1);
    for n in 0..100 {
        assert_eq!(router.matches(&format!("_INBOX.client.{n}")).plain, [1]);
    }
    assert_eq!(router.cache_len(), 0, "one-shot reply subjects leave the cache alone");
}

#[test]
fn stats_add_up_counts_and_weigh_rates_by_what_they_are_rates_of() {
    let mut total = RouterStats {
        num_subscriptions: 2,
        num_cache: 1,
        num_matches: 10,
        cache_hit_rate: 1.0,
        max_fanout: 3,
        avg_fanout: 3.0,
        ..RouterStats::default()
    };
    let other = RouterStats {
        num_subscriptions: 1,
        num_cache: 3,
        num_matches: 30,
        cache_hit_rate: 0.0,
        max_fanout: 1,
        avg_fanout: 1.0,
        ..RouterStats::default()
    };
    total.add(&other);
    assert_eq!((total.num_subscriptions, total.num_cache, total.num_matches, total.max_fanout), (3, 4, 40, 3));
    assert_eq!(total.cache_hit_rate, 0.25);
    assert_eq!(total.avg_fanout, 1.5);
    let mut empty = RouterStats::default();
    empty.add(&RouterStats::default());
    assert_eq!(empty, RouterStats::default(), "no matches: rates stay 0, not NaN");
}
