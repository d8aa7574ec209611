from outbox_bridge.cli import main

main()
