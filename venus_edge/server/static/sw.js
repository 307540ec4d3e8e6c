// The research page's service worker (venus_edge.server.webapp): it keeps the page shell, the paths in SHELL (filled
// in by the server), so that the installed app opens at once, and answers nothing else. API calls, sessions and
// research results always go to the server and are never stored: the fetch handler returns before respondWith for
// every path outside SHELL, and only shell responses are put in the cache.
"use strict";
const SHELL = [];
const CACHE = "venus-edge-shell-v1";

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((names) => Promise.all(names.filter((name) => name !== CACHE).map((name) => caches.delete(name))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin || !SHELL.includes(url.pathname)) {
    return;  // the network, as if there were no worker
  }
  // Network first, so that a server upgrade shows at once; the stored shell when the server cannot be reached.
  event.respondWith(fetch(event.request)
    .then((response) => {
      if (response.ok) {
        const copy = response.clone();
        caches.open(CACHE).then((cache) => cache.put(url.pathname, copy));
      }
      return response;
    })
    .catch(() => caches.match(url.pathname).then((cached) => cached || Response.error())));
});
