// The Kiln-Signature header of a webhook delivery (docs/api.md, "Webhooks"):
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>". Receivers
// check it with the SDKs' verify_webhook / verifyWebhook. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::broker {

std::string SignWebhook(std::string_view secret, int64_t unix_seconds, std::string_view body);

}  // namespace kiln::broker
