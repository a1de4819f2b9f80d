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

impl<T> Few<T> {
    /// The items in a `Vec` (an allocation for one item).
    pub(crate) fn into_vec(self) -> Vec<T> {
        match self {
            Self::One([item]) => vec![item],
            Self::Many(items) => items,
        }
    }
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> From<Vec<T>> for Few<T> {
    /// As it is: a `Vec` of one item stays one (it has its allocation already).
    fn from(items: Vec<T>) -> Self {
        Self::Many(items)
    }
}

/// Equal when the items are, however they are kept.
impl<T: PartialEq> PartialEq for Few<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Eq> Eq for Few<T> {}

impl<T> Extend<T> for Few<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for item in iter {
            self.push(item);
        }
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        match self {
            Self::One(item) => IntoIter::One(item.into_iter()),
            Self::Many(items) => IntoIter::Many(items.into_iter()),
        }
    }
}

/// The items of a [`Few`], by value.
pub(crate) enum IntoIter<T> {
    One(std::array::IntoIter<T, 1>),
    Many(std::vec::IntoIter<T>),
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            Self::One(items) => items.next(),
            Self::Many(items) => items.next(),
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

/// The decisions of a request's rate checks, in check order.
pub(crate) type Decided = Few<crate::Decision>;

/// (policy index, key, cost, caller's quota) of each policy checked for a request.
pub(crate) type Checks = Few<LayerCheck>;

/// (policy index, key, bound) of each in-flight slot a request needs.
pub(crate) type Claims = Few<Claim>;
