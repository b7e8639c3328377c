// Pi loads this file (package.json "pi.extensions"). Pi 1.x maps @mariozechner/pi-* imports to
// @earendil-works/pi-*, so the same source serves Pi 0.73 and 1.6.
import * as sdk from "@mariozechner/pi-coding-agent";
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";
import { registerMoat } from "../src/extension.ts";

export default function (pi: ExtensionAPI) {
	registerMoat(pi, sdk as any);
}
