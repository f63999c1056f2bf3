//! Awaiting a JS promise through one callback per isolate that settles a numbered slot, instead
//! of `JsFuture`'s two fresh closures per await (each a JS function registered with a
//! `FinalizationRegistry` and freed again by a call into wasm: 4.8 per JSON request); and short
//! waits on a timer the same way.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use worker::js_sys::Promise;
use worker::wasm_bindgen::prelude::{wasm_bindgen, Closure};
use worker::wasm_bindgen::JsValue;

#[wasm_bindgen(inline_js = "
export function settle_into(promise, slot, done) {
  promise.then((value) => done(slot, value, true), (error) => done(slot, error, false));
}
export function after(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
")]
extern "C" {
    /// Calls `done(slot, value, ok)` once `promise` settles.
    fn settle_into(promise: &Promise, slot: u32, done: &JsValue);
    /// Resolves after `ms` (a timer of the calling request's own).
    fn after(ms: f64) -> Promise;
}

/// An await in flight: who waits for it, or what it settled with.
enum Slot<T> {
    Waiting(Option<Waker>),
    Settled(T),
}

/// The awaits in flight, by slot number. Numbers are not reused while the counter has not
/// wrapped, so a promise whose future was dropped settles nothing of anyone else's.
struct Slots<T> {
    last: u32,
    live: HashMap<u32, Slot<T>>,
}

impl<T> Slots<T> {
    fn new() -> Self {
        Slots { last: 0, live: HashMap::new() }
    }

    fn open(&mut self) -> u32 {
        self.last = self.last.wrapping_add(1);
        self.live.insert(self.last, Slot::Waiting(None));
        self.last
    }

    /// Keeps the outcome; the waker to call, if the await has been polled. A slot no longer open
    /// (its future dropped) or already settled keeps nothing.
    fn settle(&mut self, slot: u32, outcome: T) -> Option<Waker> {
        let entry = self.live.get_mut(&slot)?;
        match std::mem::replace(entry, Slot::Settled(outcome)) {
            Slot::Waiting(waker) => waker,
            settled @ Slot::Settled(_) => {
                *entry = settled;
                None
            }
        }
    }

    /// The outcome once settled (closing the slot); until then remembers who to wake.
    fn poll(&mut self, slot: u32, waker: &Waker) -> Poll<Option<T>> {
        match self.live.get_mut(&slot) {
            None => Poll::Ready(None),
            Some(Slot::Waiting(waiting)) => {
                if !waiting.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    *waiting = Some(waker.clone());
                }
                Poll::Pending
            }
            Some(Slot::Settled(_)) => match self.live.remove(&slot) {
                Some(Slot::Settled(outcome)) => Poll::Ready(Some(outcome)),
                _ => Poll::Ready(None),
            },
        }
    }

    fn close(&mut self, slot: u32) {
        self.live.remove(&slot);
    }
}

type Outcome = Result<JsValue, JsValue>;

thread_local! {
    static SLOTS: RefCell<Slots<Outcome>> = RefCell::new(Slots::new());
    /// The one callback, made once per isolate and kept for its lifetime.
    static DONE: JsValue = Closure::<dyn Fn(u32, JsValue, bool)>::new(done).into_js_value();
}

fn done(slot: u32, value: JsValue, ok: bool) {
    let outcome = if ok { Ok(value) } else { Err(value) };
    // The borrow ends before waking: a wake only queues the task, it never polls in place.
    if let Some(waker) = SLOTS.with(|slots| slots.borrow_mut().settle(slot, outcome)) {
        waker.wake();
    }
}

/// A promise's outcome, as `JsFuture` gives it.
pub struct Settled {
    slot: u32,
}

pub fn settled(promise: &Promise) -> Settled {
    let slot = SLOTS.with(|slots| slots.borrow_mut().open());
    DONE.with(|done| settle_into(promise, slot, done));
    Settled { slot }
}

/// Waits `ms` on a timer without a closure of its own (`worker::Delay` makes one per wait); the
/// timer runs out even if the wait is dropped.
pub async fn sleep(ms: u64) {
    let _ = settled(&after(ms as f64)).await;
}

impl Future for Settled {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        SLOTS
            .with(|slots| slots.borrow_mut().poll(self.slot, cx.waker()))
            .map(|outcome| outcome.unwrap_or_else(|| Err(JsValue::from_str("a settled promise awaited again"))))
    }
}

impl Drop for Settled {
    fn drop(&mut self) {
        SLOTS.with(|slots| slots.borrow_mut().close(self.slot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn settled_before_the_first_poll_is_ready_at_once_and_closes() {
        let mut slots = Slots::new();
        let slot = slots.open();
        assert!(slots.settle(slot, 7).is_none(), "nobody polled yet: nothing to wake");
        let (_, w) = waker();
        assert_eq!(slots.poll(slot, &w), Poll::Ready(Some(7)));
        assert!(slots.live.is_empty());
        assert_eq!(slots.poll(slot, &w), Poll::Ready(None), "awaited again: no outcome");
    }

    #[test]
    fn a_pending_await_is_woken_once_by_its_settlement() {
        let mut slots = Slots::new();
        let slot = slots.open();
        let (count, w) = waker();
        assert_eq!(slots.poll(slot, &w), Poll::Pending);
        assert_eq!(slots.poll(slot, &w), Poll::Pending);
        slots.settle(slot, 1).expect("the poller's waker").wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(slots.poll(slot, &w), Poll::Ready(Some(1)));
    }

    #[test]
    fn the_latest_poller_is_the_one_woken() {
        let mut slots = Slots::new();
        let slot = slots.open();
        let (first, w1) = waker();
        let (second, w2) = waker();
        assert_eq!(slots.poll(slot, &w1), Poll::Pending);
        assert_eq!(slots.poll(slot, &w2), Poll::Pending);
        slots.settle(slot, 1).unwrap().wake();
        assert_eq!((first.0.load(Ordering::SeqCst), second.0.load(Ordering::SeqCst)), (0, 1));
    }

    #[test]
    fn a_dropped_await_keeps_nothing_and_disturbs_no_other() {
        let mut slots = Slots::new();
        let gone = slots.open();
        let kept = slots.open();
        slots.close(gone);
        assert!(slots.settle(gone, 1).is_none());
        assert!(!slots.live.contains_key(&gone), "a late settlement does not reopen the slot");
        let (_, w) = waker();
        assert_eq!(slots.poll(kept, &w), Poll::Pending);
        assert!(slots.settle(kept, 2).is_some());
        assert_eq!(slots.poll(kept, &w), Poll::Ready(Some(2)));
    }

    #[test]
    fn a_second_settlement_does_not_replace_the_first() {
        let mut slots = Slots::new();
        let slot = slots.open();
        slots.settle(slot, 1);
        assert!(slots.settle(slot, 2).is_none());
        let (_, w) = waker();
        assert_eq!(slots.poll(slot, &w), Poll::Ready(Some(1)));
    }

    #[test]
    fn slot_numbers_wrap_without_zero_mattering() {
        let mut slots: Slots<u8> = Slots::new();
        slots.last = u32::MAX;
        let slot = slots.open();
        assert_eq!(slot, 0);
        assert!(slots.live.contains_key(&0));
        assert_ne!(slots.open(), slot);
    }
}
