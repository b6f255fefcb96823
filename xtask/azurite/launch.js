// Runs Azurite in this process and exits as soon as stdin closes. The Rust side keeps the
// write end of that pipe, so the emulator never outlives the process that started it, even
// when that process is killed without a chance to clean up.
"use strict";
process.stdin.on("end", () => process.exit(0));
process.stdin.on("error", () => process.exit(0));
process.stdin.resume();
// On SIGINT/SIGTERM Azurite closes its servers and flushes persisted data; stop reading stdin
// so the process can then exit on its own.
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => process.stdin.destroy());
}
require("./node_modules/azurite/dist/src/azurite.js");
