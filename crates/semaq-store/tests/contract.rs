//! The store contract: every test here runs against both the memory store and the file store.

mod common;

use std::time::Duration;

use common::append_many;
use semaq_store::{DiscardPolicy, PurgeRequest, StoreError, StoreLimits};

fn unlimited() -> StoreLimits {
    StoreLimits::default()
}

fn seqs_of(store: &dyn semaq_store::StreamStore, filter: Option<&str>) -> Vec<u64> {
    let mut found = Vec::new();
    let mut from = 1;
    while let Some(message) = store.get_next(from, filter).unwrap() {
        found.push(message.seq);
        from = message.seq + 1;
    }
    found
}

fn purge(subject: Option<&str>, keep: Option<u64>, up_to_seq: Option<u64>) -> PurgeRequest {
    PurgeRequest { subject: subject.map(str::to_string), keep, up_to_seq }
}

for_both_stores! {
    fn append_then_get_returns_the_message_as_stored(fresh: unlimited()) {
        let store = &mut *fresh.store;
        assert_eq!(store.append("orders.new", None, b"one", 100).unwrap(), (1, 100));
        assert_eq!(store.append("orders.new", Some(b"NATS/1.0\r\nA: b\r\n\r\n"), b"two", 200).unwrap(), (2, 200));
        assert_eq!(store.append("orders.new", Some(b""), b"", 300).unwrap(), (3, 300));
        let first = store.get(1).unwrap().unwrap();
        assert_eq!((first.seq, first.subject.as_str(), &first.payload[..], first.timestamp_ns), (1, "orders.new", &b"one"[..], 100));
        assert_eq!(first.headers, None);
        assert_eq!(store.get(2).unwrap().unwrap().headers.as_deref(), Some(&b"NATS/1.0\r\nA: b\r\n\r\n"[..]));
        assert_eq!(store.get(3).unwrap().unwrap().headers.as_deref(), Some(&b""[..]), "empty headers are not None");
        assert_eq!(store.get(0).unwrap(), None);
        assert_eq!(store.get(4).unwrap(), None);
    }

    fn state_counts_messages_bytes_subjects_and_bounds(fresh: unlimited()) {
        let store = &mut *fresh.store;
        let empty = store.state();
        assert_eq!((empty.msgs, empty.first_seq, empty.last_seq, empty.first_ts, empty.last_ts), (0, 1, 0, 0, 0));
        store.append("a", None, b"xx", 10).unwrap();
        store.append("b", Some(b"h"), b"yyy", 20).unwrap();
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq, state.first_ts, state.last_ts), (2, 1, 2, 10, 20));
        let model = store.size_model();
        assert_eq!(state.bytes, model.message_bytes("a", None, b"xx") + model.message_bytes("b", Some(b"h"), b"yyy"));
        assert_eq!((state.num_subjects, state.num_deleted, state.corruption), (2, 0, None));
    }

    fn invalid_subjects_are_refused_and_nothing_is_stored(fresh: unlimited()) {
        let store = &mut *fresh.store;
        for subject in ["", "a.*", "a.>", "a..b", "a b"] {
            assert!(matches!(store.append(subject, None, b"x", 1), Err(StoreError::InvalidSubject(_))), "{subject:?}");
        }
        let too_long = "a".repeat(semaq_store::SUBJECT_LENGTH_MAX_BYTES + 1);
        assert!(matches!(store.append(&too_long, None, b"x", 1), Err(StoreError::InvalidSubject(_))));
        assert_eq!(store.state().last_seq, 0);
    }

    fn get_next_matches_wildcards_by_token_and_skips_deleted(fresh: unlimited()) {
        let store = &mut *fresh.store;
        for subject in ["orders.eu.new", "orders.us.new", "orders.eu.paid", "billing.eu", "orders.eu.new"] {
            store.append(subject, None, b"p", 1).unwrap();
        }
        assert_eq!(seqs_of(store, None), vec![1, 2, 3, 4, 5]);
        assert_eq!(seqs_of(store, Some(">")), vec![1, 2, 3, 4, 5]);
        assert_eq!(seqs_of(store, Some("orders.*.new")), vec![1, 2, 5]);
        assert_eq!(seqs_of(store, Some("orders.eu.>")), vec![1, 3, 5]);
        assert_eq!(seqs_of(store, Some("*.eu")), vec![4]);
        assert_eq!(seqs_of(store, Some("orders.eu.new")), vec![1, 5]);
        assert_eq!(seqs_of(store, Some("orders")), Vec::<u64>::new());
        assert_eq!(seqs_of(store, Some("nothing.here")), Vec::<u64>::new());
        assert_eq!(store.get_next(2, Some("orders.eu.new")).unwrap().unwrap().seq, 5);
        assert!(store.delete(5).unwrap());
        assert_eq!(seqs_of(store, Some("orders.eu.new")), vec![1]);
        assert_eq!(store.get_next(6, None).unwrap(), None);
    }

    fn get_next_skips_a_long_run_of_other_subjects(fresh: unlimited()) {
        let store = &mut *fresh.store;
        append_many(store, "noise", 2_000, 0);
        store.append("signal", None, b"here", 0).unwrap();
        assert_eq!(store.get_next(1, Some("signal")).unwrap().unwrap().seq, 2_001);
        assert_eq!(store.get_next(1, Some("sig*")).unwrap(), None, "* is a whole token, not a glob");
        assert_eq!(store.get_next(1, Some("*")).unwrap().unwrap().seq, 1);
    }

    fn get_last_for_subject_finds_the_newest_live_match(fresh: unlimited()) {
        let store = &mut *fresh.store;
        for subject in ["kv.a", "kv.b", "kv.a", "kv.b", "other"] {
            store.append(subject, None, b"v", 1).unwrap();
        }
        assert_eq!(store.get_last_for_subject("kv.a").unwrap().unwrap().seq, 3);
        assert_eq!(store.get_last_for_subject("kv.*").unwrap().unwrap().seq, 4);
        assert_eq!(store.get_last_for_subject(">").unwrap().unwrap().seq, 5);
        store.delete(3).unwrap();
        assert_eq!(store.get_last_for_subject("kv.a").unwrap().unwrap().seq, 1);
        store.delete(1).unwrap();
        assert_eq!(store.get_last_for_subject("kv.a").unwrap(), None);
    }

    fn delete_removes_once_and_counts_the_gap(fresh: unlimited()) {
        let store = &mut *fresh.store;
        append_many(store, "d", 5, 1);
        assert!(store.delete(3).unwrap());
        assert!(!store.delete(3).unwrap(), "already gone");
        assert!(!store.delete(99).unwrap());
        assert_eq!(store.get(3).unwrap(), None);
        let state = store.state();
        assert_eq!((state.msgs, state.num_deleted, state.first_seq, state.last_seq), (4, 1, 1, 5));
        assert!(store.delete(1).unwrap());
        assert!(store.delete(2).unwrap());
        let state = store.state();
        assert_eq!((state.first_seq, state.first_ts, state.num_deleted), (4, 4, 0), "the front moves past the gap");
        assert!(store.delete(5).unwrap());
        assert_eq!(store.state().last_seq, 5, "deleting the last message keeps last_seq");
    }

    fn purge_all_keeps_sequences_moving_forward(fresh: unlimited()) {
        let store = &mut *fresh.store;
        append_many(store, "p", 10, 1);
        assert_eq!(store.purge(&PurgeRequest::default()).unwrap(), 10);
        let state = store.state();
        assert_eq!((state.msgs, state.bytes, state.first_seq, state.last_seq, state.num_subjects), (0, 0, 11, 10, 0));
        assert_eq!(store.append("p", None, b"again", 99).unwrap().0, 11);
        assert_eq!(store.state().first_seq, 11);
    }

    fn purge_by_subject_keep_and_sequence(fresh: unlimited()) {
        let store = &mut *fresh.store;
        for index in 0..12usize {
            let subject = ["a.x", "a.y", "b"][index % 3];
            store.append(subject, None, b"m", i64::try_from(index).unwrap()).unwrap();
        }
        // seqs: a.x = 1,4,7,10   a.y = 2,5,8,11   b = 3,6,9,12
        assert_eq!(store.purge(&purge(Some("b"), None, Some(9))).unwrap(), 2, "b below 9: 3 and 6");
        assert_eq!(seqs_of(store, Some("b")), vec![9, 12]);
        let across = "keep counts across every matching subject, as nats-server's PurgeEx";
        assert_eq!(store.purge(&purge(Some("a.*"), Some(1), None)).unwrap(), 7, "{across}");
        assert_eq!(seqs_of(store, Some("a.>")), vec![11]);
        assert_eq!(store.purge(&purge(None, Some(3), None)).unwrap(), 0);
        assert_eq!(seqs_of(store, None), vec![9, 11, 12]);
        assert_eq!(store.purge(&purge(None, None, Some(11))).unwrap(), 1, "up_to_seq is exclusive");
        assert_eq!(seqs_of(store, None), vec![11, 12]);
        assert!(matches!(store.purge(&purge(None, Some(1), Some(5))), Err(StoreError::InvalidPurge)));
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq), (2, 11, 12));
    }

    fn subjects_state_counts_per_subject_under_a_filter(fresh: unlimited()) {
        let store = &mut *fresh.store;
        for subject in ["s.a", "s.b", "s.a", "t.a"] {
            store.append(subject, None, b"m", 1).unwrap();
        }
        let all = store.subjects_state(None);
        assert_eq!(all.into_iter().collect::<Vec<_>>(), vec![("s.a".into(), 2), ("s.b".into(), 1), ("t.a".into(), 1)]);
        let filtered = store.subjects_state(Some("s.*"));
        assert_eq!(filtered.into_iter().collect::<Vec<_>>(), vec![("s.a".into(), 2), ("s.b".into(), 1)]);
        store.delete(2).unwrap();
        assert_eq!(store.subjects_state(Some("s.b")).len(), 0);
        assert_eq!(store.state().num_subjects, 2);
    }

    fn max_msgs_discard_old_removes_the_oldest(fresh: StoreLimits { max_msgs: Some(3), ..StoreLimits::default() }) {
        let store = &mut *fresh.store;
        append_many(store, "m", 5, 1);
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq), (3, 3, 5));
    }

    fn max_msgs_discard_new_refuses(fresh: StoreLimits { max_msgs: Some(2), discard: DiscardPolicy::New, ..StoreLimits::default() }) {
        let store = &mut *fresh.store;
        append_many(store, "m", 2, 1);
        assert!(matches!(store.append("m", None, b"x", 3), Err(StoreError::MaxMsgs)));
        assert_eq!(store.state().last_seq, 2, "a refused message takes no sequence");
        store.delete(1).unwrap();
        assert_eq!(store.append("m", None, b"x", 3).unwrap().0, 3);
    }

    fn max_bytes_discard_old_and_new(fresh: unlimited()) {
        let store = &mut *fresh.store;
        let size = store.size_model().message_bytes("b", None, b"0123456789");
        store.update_limits(StoreLimits { max_bytes: Some(size * 3), ..StoreLimits::default() }).unwrap();
        for ts in 0..5 {
            store.append("b", None, b"0123456789", ts).unwrap();
        }
        assert_eq!((store.state().msgs, store.state().first_seq, store.state().bytes), (3, 3, size * 3));
        let refuse = StoreLimits { max_bytes: Some(size * 3), discard: DiscardPolicy::New, ..StoreLimits::default() };
        store.update_limits(refuse).unwrap();
        assert!(matches!(store.append("b", None, b"0123456789", 9), Err(StoreError::MaxBytes)));
        assert_eq!(store.state().msgs, 3);
    }

    fn per_subject_limit_removes_the_subjects_oldest(fresh: StoreLimits { max_msgs_per_subject: Some(2), ..StoreLimits::default() }) {
        let store = &mut *fresh.store;
        for subject in ["k.a", "k.b", "k.a", "k.a", "k.b", "k.a"] {
            store.append(subject, None, b"v", 1).unwrap();
        }
        assert_eq!(seqs_of(store, Some("k.a")), vec![4, 6]);
        assert_eq!(seqs_of(store, Some("k.b")), vec![2, 5]);
        assert_eq!(store.state().num_deleted, 1, "seq 3 is a gap; seq 1 left from the front");
    }

    fn per_subject_limit_with_discard_new_per_subject_refuses(fresh: StoreLimits {
        max_msgs_per_subject: Some(1),
        discard: DiscardPolicy::New,
        discard_new_per_subject: true,
        ..StoreLimits::default()
    }) {
        let store = &mut *fresh.store;
        store.append("k.a", None, b"v", 1).unwrap();
        assert!(matches!(store.append("k.a", None, b"v", 2), Err(StoreError::MaxMsgsPerSubject)));
        store.append("k.b", None, b"v", 3).unwrap();
        assert_eq!(store.state().msgs, 2);
    }

    fn per_subject_limit_with_plain_discard_new_still_drops_old(fresh: StoreLimits {
        max_msgs_per_subject: Some(1),
        discard: DiscardPolicy::New,
        ..StoreLimits::default()
    }) {
        let store = &mut *fresh.store;
        store.append("k.a", None, b"v", 1).unwrap();
        store.append("k.a", None, b"v", 2).unwrap();
        assert_eq!(seqs_of(store, None), vec![2]);
    }

    fn max_msg_size_refuses_large_messages(fresh: StoreLimits { max_msg_size: Some(8), ..StoreLimits::default() }) {
        let store = &mut *fresh.store;
        store.append("s", Some(b"hdr"), b"12345", 1).unwrap();
        let refused = store.append("s", Some(b"hdr"), b"123456", 2);
        assert!(matches!(refused, Err(StoreError::MessageTooLarge { size_bytes: 9, max_bytes: 8 })), "{refused:?}");
        assert_eq!(store.state().msgs, 1);
    }

    fn max_age_expires_from_the_front(fresh: StoreLimits { max_age: Some(Duration::from_secs(10)), ..StoreLimits::default() }) {
        let store = &mut *fresh.store;
        let second = 1_000_000_000i64;
        for ts in [1, 2, 5, 20] {
            store.append("t", None, b"x", ts * second).unwrap();
        }
        assert_eq!(store.enforce_limits(11 * second).unwrap(), 1, "age exactly max_age has expired");
        assert_eq!(store.enforce_limits(15 * second).unwrap(), 2);
        assert_eq!(seqs_of(store, None), vec![4]);
        assert_eq!(store.enforce_limits(100 * second).unwrap(), 1);
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq, state.last_ts), (0, 5, 4, 20 * second));
        assert_eq!(store.append("t", None, b"x", 101 * second).unwrap().0, 5);
    }

    fn lowering_limits_applies_them_at_once(fresh: unlimited()) {
        let store = &mut *fresh.store;
        for subject in ["a", "b", "a", "b", "a"] {
            store.append(subject, None, b"v", 1).unwrap();
        }
        let removed = store.update_limits(StoreLimits { max_msgs_per_subject: Some(1), ..StoreLimits::default() }).unwrap();
        assert_eq!(removed, 3);
        assert_eq!(seqs_of(store, None), vec![4, 5]);
        assert_eq!(store.update_limits(StoreLimits { max_msgs: Some(1), ..StoreLimits::default() }).unwrap(), 1);
        assert_eq!(seqs_of(store, None), vec![5]);
        assert_eq!(store.limits().max_msgs, Some(1));
    }

    fn compact_and_sync_keep_everything_readable(fresh: unlimited()) {
        let store = &mut *fresh.store;
        append_many(store, "c", 200, 1);
        store.purge(&purge(None, None, Some(150))).unwrap();
        store.sync().unwrap();
        store.sync().unwrap();
        store.compact().unwrap();
        assert_eq!(seqs_of(store, None), (150..=200).collect::<Vec<_>>());
        assert!(store.stored_bytes() > 0);
        store.close().unwrap();
    }

    fn commits_taken_aside_keep_what_they_cover_and_leave_no_report_on_a_healthy_disk(fresh: unlimited()) {
        let store = &mut *fresh.store;
        append_many(store, "c", 3, 1);
        assert!(store.remove(2).unwrap());
        let ticket = store.sync_begin_aside().unwrap();
        store.sync_finish(ticket.run()).unwrap();
        append_many(store, "c", 1, 4);
        store.sync_aside().unwrap();
        assert!(store.report_dropped().is_ok(), "nothing was dropped");
        assert_eq!(seqs_of(store, None), vec![1, 3, 4]);
        store.close().unwrap();
    }
}

for_both_stores! {
    fn a_refused_batch_is_removed_whole_and_its_sequences_stay_used(fresh: unlimited()) {
        let store = &mut *fresh.store;
        for subject in ["a", "b", "c", "c"] {
            store.append(subject, None, b"x", 1).unwrap();
        }
        assert_eq!(store.remove_refused(3, 4).unwrap(), 2);
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq), (2, 1, 4));
        assert_eq!(store.subjects_state(None).get("c"), None, "its subjects go with it");
        assert_eq!((store.get(3).unwrap(), store.get(4).unwrap()), (None, None));
        assert_eq!(store.append("d", None, b"y", 2).unwrap().0, 5);
        // At the front: the stream starts after it.
        assert_eq!(store.remove_refused(5, 5).unwrap(), 1);
        store.purge(&purge(None, None, None)).unwrap();
        store.append("e", None, b"z", 3).unwrap();
        store.append("e", None, b"z", 4).unwrap();
        assert_eq!(store.remove_refused(6, 7).unwrap(), 2);
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq), (0, 8, 7));
    }

    fn skip_to_moves_an_empty_store_to_a_later_sequence(fresh: unlimited()) {
        let store = &mut *fresh.store;
        assert!(store.skip_to(10).unwrap());
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq), (0, 10, 9));
        assert_eq!(store.append("a", None, b"x", 1).unwrap().0, 10);
        assert!(!store.skip_to(20).unwrap(), "a store holding messages does not skip");
        assert_eq!(store.append("a", None, b"y", 2).unwrap().0, 11);
        store.purge(&purge(None, None, None)).unwrap();
        assert!(!store.skip_to(5).unwrap(), "never backwards");
        assert!(store.skip_to(15).unwrap());
        assert_eq!(store.append("a", None, b"z", 3).unwrap().0, 15);
    }
}

for_both_stores! {
    fn skip_msgs_keeps_a_gap_behind_stored_messages_as_deleted(fresh: unlimited()) {
        let store = &mut *fresh.store;
        append_many(store, "a", 3, 1);
        assert!(store.skip_msgs(7).unwrap(), "sequences 4 to 6 are skipped");
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.last_seq, state.num_deleted), (3, 1, 6, 3));
        assert_eq!(store.append("b", None, b"x", 1).unwrap().0, 7);
        assert_eq!(seqs_of(store, None), vec![1, 2, 3, 7]);
        assert_eq!(store.get(5).unwrap(), None);
        assert!(!store.skip_msgs(7).unwrap(), "never backwards");
        assert!(!store.skip_msgs(8 + (1 << 20) + 1).unwrap(), "a gap over the bound is not kept");
        assert_eq!(store.state().last_seq, 7, "and changes nothing");
        // Removing what was before the gap takes the gap with it.
        store.purge(&purge(None, None, Some(7))).unwrap();
        let state = store.state();
        assert_eq!((state.msgs, state.first_seq, state.num_deleted), (1, 7, 0));
        store.purge(&purge(None, None, None)).unwrap();
        assert!(store.skip_msgs(20).unwrap(), "an empty store skips as skip_to does");
        assert_eq!(store.append("a", None, b"y", 2).unwrap().0, 20);
    }
}
