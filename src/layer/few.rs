//! [`Few`]: a request's checks and decisions, inline when there is one.

use std::ops::{Deref, DerefMut};

use crate::layer::in_flight_entry::Claim;
use crate::layer::limiter_calls::LayerCheck;

/// A few items, kept inline when there is one: a request limited by one policy (the
/// common case) allocates nothing for its checks or its decisions.
#[derive(Debug, Clone)]
pub(crate) enum Few<T> {
    One([T; 1]),
    Many(Vec<T>),
}

impl<T> Few<T> {
    #[inline]
    pub(crate) fn new() -> Self {
        Self::Many(Vec::new())
    }

    #[inline]
    pub(crate) fn push(&mut self, item: T) {
        match self {
            Self::Many(items) if !items.is_empty() => items.push(item),
            Self::Many(_) => *self = Self::One([item]),
            Self::One(_) => {
                if let Self::One([first]) = std::mem::replace(self, Self::Many(Vec::new())) {
                    *self = Self::Many(vec![first, item]);
                }
            }
        }
    }
}

impl<T> Deref for Few<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Self::One(item) => item,
            Self::Many(items) => items,
        }
    }
}

impl<T> DerefMut for Few<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Self::One(item) => item,
            Self::Many(items) => items,
        }
    }
}

impl<T> FromIterator<T> for Few<T> {
    #[inline]
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut few = Self::new();
        for item in iter {
            few.push(item);
        }
        few
    }
}

/// (policy index, key, cost, caller's quota) of each policy checked for a request.
pub(crate) type Checks = Few<LayerCheck>;

/// (policy index, key, bound) of each in-flight slot a request needs.
pub(crate) type Claims = Few<Claim>;
