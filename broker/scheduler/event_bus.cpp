#include "broker/scheduler/event_bus.hpp"

#include <thread>

#include "broker/store/schedule_store.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("events");

}  // namespace

void EventBus::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    auto conn = RedisConnection::Lazy(endpoint_);
    if (auto st = conn->Subscribe({ScheduleStore::kEventsChannel}); !st.ok()) {
      kLog.Debug({}, "{} (retrying)", st.ToString());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    while (!stop.stop_requested()) {
      auto msg = conn->Receive(200);
      if (!msg.ok()) {
        kLog.Debug({}, "{} (reconnecting)", msg.status().ToString());
        break;
      }
      // ["message", channel, payload]
      if (*msg && (*msg)->elements.size() == 3 && (*msg)->elements[0].str == "message") {
        Handle((*msg)->elements[2].str);
      }
    }
  }
}

void EventBus::Handle(const std::string& payload) {
  auto space = payload.find(' ');
  if (space == std::string::npos) return;
  std::string_view verb(payload.data(), space);
  std::string id = payload.substr(space + 1);
  if (verb == "cancel") {
    cancel_(id);
  } else if (verb == "done" && waiters_->AwaitsEndFromElsewhere(id)) {
    // Ended on another broker. An end this broker stored is its
    // dispatcher's to hand over: it is marked while being stored, and its
    // waiters are answered (no longer waiting) once it is.
    auto record = jobs_->Load(id);
    if (record.ok() && IsTerminal(record->status)) waiters_->Notify(*record);
  }
}

}  // namespace kiln::broker
