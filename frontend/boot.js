// Starts the app. A file of its own, not an inline script: the page's
// Content-Security-Policy runs scripts from drainwatch's own files only.
import init from './frontend.js';
init();
