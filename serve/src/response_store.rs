//! Finished Responses answers kept for `previous_response_id` (responses.rs): a part of
//! [`crate::state::AppState`], apart from the handlers so the state holds it without
//! importing the code that reads the state.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// How many finished responses the store keeps (the least recently used goes first).
pub const STORE_CAPACITY: usize = 256;

/// One stored response: the conversation as input items (its output included) and the
/// answer as sent.
struct Stored {
    items: Arc<Vec<Value>>,
    response: Value,
}

/// Finished responses by id, at most [`STORE_CAPACITY`], least recently used evicted.
/// In memory only: a restart forgets them (a follow-up then gets a 404).
#[derive(Default)]
pub struct Store {
    inner: Mutex<(HashMap<String, Stored>, VecDeque<String>)>,
}

impl Store {
    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Stored>, VecDeque<String>)> {
        // A panic while holding the lock leaves consistent data (each edit is one call).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(order: &mut VecDeque<String>, id: &str) {
        if let Some(at) = order.iter().position(|k| k == id) {
            order.remove(at);
        }
        order.push_back(id.to_string());
    }

    pub(crate) fn put(&self, id: String, items: Vec<Value>, response: Value) {
        let mut g = self.lock();
        let (map, order) = &mut *g;
        Self::touch(order, &id);
        map.insert(id, Stored { items: Arc::new(items), response });
        while map.len() > STORE_CAPACITY {
            let Some(old) = order.pop_front() else { break };
            map.remove(&old);
        }
    }

    pub(crate) fn items(&self, id: &str) -> Option<Arc<Vec<Value>>> {
        let mut g = self.lock();
        let (map, order) = &mut *g;
        let items = map.get(id).map(|s| Arc::clone(&s.items))?;
        Self::touch(order, id);
        Some(items)
    }

    pub(crate) fn response(&self, id: &str) -> Option<Value> {
        self.lock().0.get(id).map(|s| s.response.clone())
    }
}
